# Sourced by the scripts that run pinned code (scripts/eval_n50.sh, benchmarks/speed_table.sh).
#
#   pinned_worktree DIR COMMIT   # make DIR a detached git worktree at COMMIT, or check that it is
#
# A run that spans sessions imports its code from DIR (PYTHONPATH=DIR), so it never mixes code
# versions. Exits 2 with a one-line error when DIR exists at another commit.
pinned_worktree() {
  local dir=$1 commit=$2
  if [[ ! -d $dir ]]; then git worktree add --detach "$dir" "$commit"; fi
  if [[ $(git -C "$dir" rev-parse HEAD) != $(git rev-parse "$commit^{commit}") ]]; then
    echo "$(basename "$0" .sh): $dir is not at the pinned $commit; remove it (git worktree remove $dir)" >&2
    exit 2
  fi
}
