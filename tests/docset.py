"""A small labelled document set: facts in PDF tables, in a two-column PDF, on navigation-heavy
HTML pages, in a DOCX and a CSV, each with the question that finds it and the words its passage
must hold. :func:`write_docset` writes the files into a folder; :data:`FACTS` are the labels."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import pdf_bytes, pdf_escape


@dataclass(frozen=True)
class Fact:
    question: str
    source: str
    #: words that must stand together on one line of the passage retrieved first
    line: tuple[str, ...] = ()
    #: text the passage must hold, whitespace folded (a column read as the column it is)
    phrase: str = ""
    #: words that must not be in any passage (navigation, footers)
    absent: tuple[str, ...] = ()


FACTS = (
    Fact("What is the Krakow office Wi-Fi network?", "offices.pdf", ("Krakow", "KRK-Staff-5G")),
    Fact("Which floor is the Lisbon office on?", "offices.pdf", ("Lisbon", "4th floor")),
    Fact(
        "How many weeks of parental leave?",
        "benefits.pdf",
        phrase="Staff receive 20 weeks of parental leave at full pay.",
    ),
    Fact(
        "When are expense reports due?",
        "benefits.pdf",
        phrase="Submit expense reports by the 5th of the following month.",
    ),
    Fact(
        "Who approves hardware purchases?",
        "it/purchasing.html",
        ("hardware purchases", "Priya Nair"),
        absent=("Subscribe to our newsletter", "Cookie settings"),
    ),
    Fact(
        "What is the VPN server address?",
        "it/vpn.html",
        ("vpn.acme.example",),
        absent=("Subscribe to our newsletter", "All rights reserved"),
    ),
    Fact("What is the on-call phone number?", "oncall.docx", ("+48 12 555 0199",)),
    Fact("Which department handles visas?", "contacts.csv", ("department: Legal",)),
)


def _cell(x: float, y: float, text: str) -> str:
    return f"BT /F1 10 Tf {x:g} {y:g} Td ({pdf_escape(text)}) Tj ET"


def table_ops(rows: list[list[str]], *, top: float = 700, widths: tuple[float, ...]) -> str:
    """A ruled table (each cell's borders drawn as lines) with its text, from ``top``."""
    height, left = 20.0, 72.0
    ops = ["0.5 w"]
    right = left + sum(widths)
    bottom = top - height * len(rows)
    for r in range(len(rows) + 1):
        y = top - r * height
        ops.append(f"{left:g} {y:g} m {right:g} {y:g} l S")
    x = left
    for w in (0.0, *widths):
        x += w
        ops.append(f"{x:g} {top:g} m {x:g} {bottom:g} l S")
    for r, row in enumerate(rows):
        x = left
        for w, text in zip(widths, row, strict=True):
            ops.append(_cell(x + 4, top - (r + 1) * height + 6, text))
            x += w
    return "\n".join(ops)


def columns_ops(left: list[str], right: list[str]) -> str:
    """Two columns of lines, the left one written first (as a word processor does)."""
    ops = [_cell(72, 720 - 14 * i, line) for i, line in enumerate(left)]
    ops += [_cell(320, 720 - 14 * i, line) for i, line in enumerate(right)]
    return "\n".join(ops)


OFFICES = [
    ["Office", "Address", "Wi-Fi network", "Floor"],
    ["Oslo", "Karl Johans gate 1", "OSL-Staff", "3rd floor"],
    ["Krakow", "Rynek Glowny 12", "KRK-Staff-5G", "2nd floor"],
    ["Lisbon", "Rua Augusta 40", "LIS-Staff", "4th floor"],
]

BENEFITS_LEFT = [
    "Benefits overview.",
    "Staff receive 20 weeks of",
    "parental leave at full pay.",
    "Leave starts on the date you",
    "choose, up to 4 weeks early.",
]
BENEFITS_RIGHT = [
    "Expenses and travel.",
    "Submit expense reports by the",
    "5th of the following month.",
    "Late reports are paid with the",
    "next payroll run.",
]

NAV = (
    "<header><nav><ul><li><a href='/'>Home</a></li><li><a href='/it'>IT</a></li>"
    "<li><a href='/hr'>HR</a></li><li><a href='/news'>News</a></li>"
    "<li><a href='/search'>Search the intranet</a></li></ul></nav></header>"
    "<aside class='sidebar'><h3>Quick links</h3><ul><li><a href='/a'>Cookie settings</a></li>"
    "<li><a href='/b'>Canteen menu</a></li><li><a href='/c'>Room booking</a></li></ul></aside>"
)
FOOTER = (
    "<footer><p>Subscribe to our newsletter for weekly updates.</p>"
    "<p>Copyright 2026 Acme Corp. All rights reserved.</p>"
    "<ul><li><a href='/privacy'>Privacy</a></li><li><a href='/terms'>Terms</a></li></ul></footer>"
)


def _page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{NAV}"
        f"<main><article><h1>{title}</h1>{body}</article></main>{FOOTER}</body></html>"
    )


def docx_bytes(paragraphs: list[str], title: str) -> bytes:
    """A minimal .docx: its paragraphs, and ``title`` in its core properties."""
    import io

    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    core = (
        '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/'
        'metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>{title}</dc:title></cp:coreProperties>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(
            "word/document.xml", f'<w:document xmlns:w="{ns}"><w:body>{body}</w:body></w:document>'
        )
        zf.writestr("docProps/core.xml", core)
    return out.getvalue()


def write_docset(folder: Path) -> Path:
    """The labelled documents in ``folder`` (created); returns it."""
    (folder / "it").mkdir(parents=True, exist_ok=True)
    offices = "\n".join(
        [_cell(72, 740, "Office directory"), table_ops(OFFICES, widths=(70, 140, 110, 80))]
    )
    (folder / "offices.pdf").write_bytes(pdf_bytes([offices], "Office directory", raw=True))
    benefits = columns_ops(BENEFITS_LEFT, BENEFITS_RIGHT)
    (folder / "benefits.pdf").write_bytes(pdf_bytes([benefits], raw=True))
    (folder / "it" / "purchasing.html").write_text(
        _page(
            "Purchasing",
            "<p>All hardware purchases are approved by Priya Nair, the IT lead, before an "
            "order is placed with a supplier.</p><p>Software licences are bought through the "
            "service desk, which keeps the licence register up to date.</p>",
        )
    )
    (folder / "it" / "vpn.html").write_text(
        _page(
            "VPN access",
            "<p>Connect to the VPN server at vpn.acme.example with your staff account; the "
            "client is installed on every company laptop.</p><p>Two-factor sign-in is required "
            "for every connection from outside the office network.</p>",
        )
    )
    (folder / "oncall.docx").write_bytes(
        docx_bytes(
            ["Reach the engineer on call at +48 12 555 0199, day or night.",
             "Page them only for outages that affect customers."],
            title="On-call handbook",
        )
    )  # fmt: skip
    (folder / "contacts.csv").write_text(
        "topic,department,contact\nvisas,Legal,Jan Kowalski\npayroll,Finance,Dana Reyes\n"
        "laptops,IT,Priya Nair\n"
    )
    return folder
