"""What gaprag sends a Milvus server, without one: store addresses and the allow-list parsed,
filters and excluded ids as expressions whose values are string literals."""

from __future__ import annotations

import json

import pytest

from gaprag.errors import GapragError, InputError
from gaprag.operator import (
    OperatorPolicy,
    is_store_address,
    parse_store_addresses,
    store_address,
)
from gaprag.stores.milvus import analyzer_for, ids_filter, milvus_filter, quoted


def test_a_store_address_is_parsed_with_its_collection() -> None:
    where = store_address("milvus://DB.example:19530/docs_2026")
    assert (where.host, where.port, where.collection) == ("db.example", 19530, "docs_2026")
    assert where.uri == "http://db.example:19530"
    assert str(where) == "milvus://db.example:19530/docs_2026"
    assert is_store_address("milvus://h:1/c") and not is_store_address("./milvus")


@pytest.mark.parametrize(
    "text",
    ["milvus://h/docs", "milvus://h:99999/docs", "milvus://h:1/", "milvus://h:1/a-b",
     "milvus://u:p@h:1/docs", "milvus://h:1/docs\n", "http://h:1/docs", "milvus://h:x/d"],
)  # fmt: skip
def test_a_bad_store_address_is_refused_with_the_form(text: str) -> None:
    with pytest.raises(InputError) as err:
        store_address(text)
    assert "milvus://HOST:PORT/COLLECTION" in err.value.hint


def test_the_allow_list_admits_a_server_or_one_collection() -> None:
    server, one = parse_store_addresses("milvus://10.0.0.5:19530, milvus://db:19530/docs")
    policy = OperatorPolicy(allowed_stores=(server, one))
    assert policy.store_allowed("milvus://10.0.0.5:19530/anything")
    assert policy.store_allowed("milvus://DB:19530/docs")
    assert not policy.store_allowed("milvus://db:19530/other")
    assert not policy.store_allowed("milvus://10.0.0.5:19531/anything")
    assert not policy.store_allowed("milvus://10.0.0.5:19530/a b")
    with pytest.raises(GapragError, match="GAPRAG_ALLOWED_STORES"):
        parse_store_addresses("milvus://db/docs")


def test_a_filter_is_json_paths_equal_to_literals_and_ids_are_literals() -> None:
    expr = milvus_filter({"department": ["hr", "it"], "page": 3, "draft": False}, ["a", 'b"'])
    assert expr == (
        '(meta["department"] == "hr" or meta["department"] == "it") and (meta["page"] == 3) '
        'and (meta["draft"] == false) and pk not in ["a", "b\\""]'
    )
    assert milvus_filter({}) == "" and ids_filter(["x"]) == 'pk in ["x"]'


@pytest.mark.parametrize(
    "value", ['" or 1 == 1 or "', '\\" or true', "a\nb\x00c", "]) or pk != ([", "ünï ✓"]
)
def test_a_hostile_value_stays_one_string_literal(value: str) -> None:
    literal = quoted(value)
    assert literal.startswith('"') and literal.endswith('"')
    assert json.loads(literal) == value  # the escapes Milvus reads back as the same string
    inner = literal[1:-1].replace("\\\\", "").replace('\\"', "")
    assert '"' not in inner  # no unescaped quote ends the literal early


def test_the_bm25_language_picks_an_analyzer() -> None:
    assert analyzer_for("english") == {"type": "english"}
    assert analyzer_for("none") == {"type": "standard"}
    assert analyzer_for("french")["filter"][1] == {"type": "stemmer", "language": "french"}
    with pytest.raises(GapragError, match="no Milvus analyzer"):
        analyzer_for("klingon")
