"""Render contract facts as a Markdown document (Jinja template) and as a PDF (fpdf2).

The Markdown is the primary rendering; the PDF lays out that same Markdown text, so the two always
carry the same words. Both are deterministic: the same facts give the same bytes. Nothing in a
document depends on the day it was rendered or the wall clock, so a document changes only when its
facts do, and the hash manifest of a day (`store.py`) tells the changed documents apart.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2
from fpdf import FPDF
from fpdf.fonts import CoreFont

from contracts.model import ContractFacts
from contracts.parse import NO_EXPIRY, NOT_STATED, escape_cell, is_separator_row, split_row

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
CONTRACT_TEMPLATE = "contract.md.j2"
PDF_PRODUCER = "churnbench contracts"


@dataclass(frozen=True)
class RenderedContract:
    """One contract's documents as bytes; the store writes them as `<contract_id>.md|.pdf`."""

    contract_id: str
    markdown: bytes
    pdf: bytes

    @property
    def markdown_sha256(self) -> str:
        return hashlib.sha256(self.markdown).hexdigest()

    @property
    def pdf_sha256(self) -> str:
        return hashlib.sha256(self.pdf).hexdigest()


# ---------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------


def format_day(value: dt.date | None, *, missing: str = NOT_STATED) -> str:
    return missing if value is None else value.isoformat()


def format_amount(value: float | None) -> str:
    return NOT_STATED if value is None else f"{value:,.2f}"


def format_usd(value: float | None) -> str:
    return NOT_STATED if value is None else f"USD {value:,.2f}"


def format_count(value: int | None) -> str:
    return NOT_STATED if value is None else str(value)


def format_days(value: int | None) -> str:
    return NOT_STATED if value is None else f"{value} days"


def format_yes_no(value: bool | None) -> str:
    return NOT_STATED if value is None else ("Yes" if value else "No")


def status_line(facts: ContractFacts) -> str:
    """The informative status of the document's day, worded from dates that do not move day by day
    (so the line changes only when the status does)."""
    if facts.status == "active":
        return "Active."
    if facts.status == "expired":
        ended = max(t.expires_on for t in facts.terms)
        line = f"Expired. The last term ended on {ended.isoformat()}."
        if facts.expired_on is not None:
            line += f" The expiry was recorded on {facts.expired_on.isoformat()}."
        return line
    return f"Pending. The first term takes effect on {facts.first_term.effective_on.isoformat()}."


def _notice_deadline(facts: ContractFacts) -> dt.date | None:
    if facts.renewal_notice_days is None:
        return None
    return facts.current_term.expires_on - dt.timedelta(days=facts.renewal_notice_days)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=False,  # Markdown, not HTML
        undefined=jinja2.StrictUndefined,  # a typo in the template fails loudly instead of rendering ""
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals["NO_EXPIRY"] = NO_EXPIRY
    env.filters.update(
        day=format_day, amount=format_amount, usd=format_usd, count=format_count, days=format_days,
        yesno=format_yes_no, cell=escape_cell,
    )
    return env


def render_markdown(facts: ContractFacts) -> str:
    text = _environment().get_template(CONTRACT_TEMPLATE).render(
        c=facts, status_line=status_line(facts), notice_deadline=_notice_deadline(facts))
    # Exactly one blank line between blocks and one newline at the end, whatever the template's
    # conditionals left behind: byte-stable output that diffs cleanly.
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------
# PDF: lays out the Markdown's blocks (headings, paragraphs with **bold**, bullet lists, tables)
# ---------------------------------------------------------------------------------------------------

_FONT = "Helvetica"
_LATIN1_FALLBACK = {"\u2014": "-", "\u2013": "-", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                    "\u2026": "...", "\u00a0": " "}


def _pdf_text(text: str) -> str:
    """The core PDF fonts cover Latin-1 only: map what has a close equivalent, drop accents elsewhere,
    and replace anything left with '?' (never fail a whole day on one exotic character)."""
    try:
        text.encode("latin-1")
        return text
    except UnicodeEncodeError:
        pass
    mapped = "".join(_LATIN1_FALLBACK.get(ch, ch) for ch in text)
    out = []
    for ch in mapped:
        try:
            ch.encode("latin-1")
            out.append(ch)
        except UnicodeEncodeError:
            base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append(base or "?")
    return "".join(out)


def _blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """Split the Markdown into (kind, lines) blocks: heading1, heading2, table, bullets, paragraph."""
    blocks: list[tuple[str, list[str]]] = []
    for chunk in markdown.split("\n\n"):
        lines = [ln for ln in chunk.split("\n") if ln.strip()]
        if not lines:
            continue
        first = lines[0]
        if first.startswith("## "):
            blocks.append(("heading2", [first[3:]]))
            lines = lines[1:]
        elif first.startswith("# "):
            blocks.append(("heading1", [first[2:]]))
            lines = lines[1:]
        if not lines:
            continue
        if lines[0].startswith("|"):
            blocks.append(("table", lines))
        elif lines[0].startswith("- "):
            blocks.append(("bullets", [ln[2:] for ln in lines]))
        else:
            blocks.append(("paragraph", [" ".join(lines)]))
    return blocks


def _table_rows(lines: list[str]) -> list[list[str]]:
    return [split_row(ln) for ln in lines if not is_separator_row(ln)]


# Width of a word in 1/1000 em per font style. The core fonts' metrics never change and the clauses repeat
# the same words in every document, so this cache turns most measurements into one lookup.
_WIDTH_UNITS: dict[tuple[str, str], int] = {}
_WIDTH_CACHE_SIZE = 200_000


class _Page:
    """A small layout engine over fpdf2's `text`, `rect` and `add_page`: word wrapping with the core
    fonts' glyph widths, bold spans, bullets and ruled tables. fpdf2's `multi_cell`, `write` and `table`
    re-measure the line for every character they add (about 0.2 s per document here); drawing the same
    text this way takes milliseconds, which keeps a day's ~60 PDFs well inside the 5 s budget."""

    WIDTH, HEIGHT = 210.0, 297.0  # A4, mm
    LEFT, RIGHT, TOP, BOTTOM = 18.0, 18.0, 16.0, 18.0

    def __init__(self, pdf: FPDF, title: str) -> None:
        self.pdf = pdf
        self.title = title
        self.y = self.TOP
        # Glyph widths (1/1000 em) of both styles, read before the first page exists: selecting a font
        # on a page writes to its content stream, and measuring must never change the bytes drawn.
        self.glyphs: dict[str, dict[str, int]] = {}
        for style in ("B", ""):
            pdf.set_font(_FONT, style, 10)
            font = pdf.current_font
            assert isinstance(font, CoreFont)  # Helvetica: a core font, widths by character
            self.glyphs[style] = font.cw
        self.current: tuple[str, float] = ("", 10)
        pdf.add_page()

    @property
    def text_width(self) -> float:
        return self.WIDTH - self.LEFT - self.RIGHT

    def _font(self, style: str, size: float) -> None:
        if self.current != (style, size):  # fpdf2's set_font is costly even when nothing changes
            self.pdf.set_font(_FONT, style, size)
            self.current = (style, size)

    def measure(self, text: str, style: str, size: float) -> float:
        key = (style, text)
        units = _WIDTH_UNITS.get(key)
        if units is None:
            glyphs = self.glyphs[style]
            units = sum(glyphs.get(ch, 600) for ch in text)
            if len(_WIDTH_UNITS) < _WIDTH_CACHE_SIZE:
                _WIDTH_UNITS[key] = units
        return units * size / 1000 * 25.4 / 72

    def wrap(self, spans: list[tuple[str, str]], size: float, width: float) -> list[list[tuple[str, str]]]:
        """Break (style, text) spans into lines of (style, text) spans no wider than `width` (a single
        word wider than `width` gets a line of its own)."""
        lines: list[list[tuple[str, str]]] = [[]]
        used = 0.0
        space = self.measure(" ", "", size)
        for style, text in spans:
            for word in text.split(" "):
                if not word:
                    continue
                w = self.measure(word, style, size)
                line = lines[-1]
                if line and used + space + w > width:
                    line = []
                    lines.append(line)
                    used = 0.0
                if not line:
                    line.append((style, word))
                else:
                    used += space
                    last_style, last_text = line[-1]
                    if last_style == style:
                        line[-1] = (style, f"{last_text} {word}")
                    else:
                        line[-1] = (last_style, last_text + " ")  # the space belongs to the earlier span
                        line.append((style, word))
                used += w
        return lines

    def need(self, height: float) -> None:
        """Start a new page unless `height` more millimetres fit on this one."""
        if self.y + height > self.HEIGHT - self.BOTTOM:
            self.pdf.add_page()
            self.y = self.TOP

    def draw_line(self, spans: list[tuple[str, str]], x: float, size: float, height: float) -> None:
        baseline = self.y + height * 0.75
        for style, text in spans:
            self._font(style, size)
            self.pdf.text(x, baseline, text)
            x += self.measure(text, style, size)

    def paragraph(self, text: str, *, size: float = 9.5, height: float = 4.3, indent: float = 0.0,
                  style: str = "") -> None:
        """A paragraph whose `**...**` spans are bold (the only inline markup the template uses)."""
        spans = [("B" if i % 2 else style, part) for i, part in enumerate(text.split("**")) if part]
        for line in self.wrap(spans, size, self.text_width - indent):
            self.need(height)
            self.draw_line(line, self.LEFT + indent, size, height)
            self.y += height

    def table(self, rows: list[list[str]], weights: tuple[int, ...], size: float) -> None:
        """A ruled table; the first row is the header, repeated on every page the table runs onto."""
        total = sum(weights)
        widths = [self.text_width * w / total for w in weights]
        pad, height = 0.9, size * 0.42
        self.pdf.set_fill_color(232, 232, 232)
        for n, row in enumerate(rows):
            style = "B" if n == 0 else ""
            cells = [self.wrap([(style, cell)], size, w - 2 * pad) for cell, w in zip(row, widths, strict=True)]
            row_h = max(len(c) for c in cells) * height + 2 * pad
            if n > 0 and self.y + row_h > self.HEIGHT - self.BOTTOM:
                self.need(row_h + self.HEIGHT)  # forces the page break
                self.table(rows[:1], weights, size)
            x, top = self.LEFT, self.y
            for lines, w in zip(cells, widths, strict=True):
                self.pdf.rect(x, top, w, row_h, style="DF" if n == 0 else "D")
                for k, line in enumerate(lines):
                    self.y = top + pad + k * height
                    self.draw_line(line, x + pad, size, height)
                x += w
            self.y = top + row_h

    def footers(self) -> None:
        """'<title> - page n of m' on every page, drawn once the page count is known."""
        pages = self.pdf.page_no()
        self._font("", 8)
        for number in range(1, pages + 1):
            self.pdf.page = number
            self.pdf.current_font_is_set_on_page = False  # each page's stream needs its own font selection
            text = f"{self.title}  -  page {number} of {pages}"
            self.pdf.text((self.WIDTH - self.measure(text, "", 8)) / 2, self.HEIGHT - 9, text)
        self.pdf.page = pages


# Column weights of the tables the template makes, by column count.
_COLUMN_WEIGHTS = {2: (1, 2), 8: (4, 8, 10, 10, 10, 8, 11, 9)}


def render_pdf(facts: ContractFacts, markdown: str | None = None) -> bytes:
    """The contract as a PDF with extractable text, laid out from its Markdown. Deterministic: the
    creation date is the day the contract's record last changed (never the wall clock) and the
    producer is fixed, so the same facts give the same bytes."""
    markdown = render_markdown(facts) if markdown is None else markdown
    pdf = FPDF(format="A4", unit="mm")
    title = _pdf_text(f"Software Subscription Agreement {facts.contract_id}")
    pdf.set_title(title)
    pdf.set_subject(_pdf_text(f"Contract {facts.contract_id} with {facts.vendor_name or NOT_STATED}"))
    pdf.set_author("churnbench")
    pdf.set_creator(PDF_PRODUCER)
    pdf.set_producer(PDF_PRODUCER)
    recorded = facts.recorded_on
    pdf.set_creation_date(dt.datetime(recorded.year, recorded.month, recorded.day, tzinfo=dt.UTC))
    pdf.set_auto_page_break(False)  # `_Page` breaks pages itself
    page = _Page(pdf, title)
    for kind, lines in _blocks(markdown):
        if kind == "heading1":
            page.paragraph(_pdf_text(lines[0]), size=14, height=7, style="B")
            page.y += 1.5
        elif kind == "heading2":
            page.need(5.5 + 13)  # keep a heading with the first lines of its section
            page.y += 1
            page.paragraph(_pdf_text(lines[0]), size=10.5, height=5.5, style="B")
        elif kind == "paragraph":
            page.paragraph(_pdf_text(lines[0]))
            page.y += 1.5
        elif kind == "bullets":
            for item in lines:
                page.paragraph(_pdf_text("- " + item), indent=4)
            page.y += 1.5
        else:
            rows = [[_pdf_text(cell) for cell in row] for row in _table_rows(lines)]
            columns = len(rows[0])
            page.table(rows, _COLUMN_WEIGHTS.get(columns, (1,) * columns), 8 if columns > 2 else 8.5)
            page.y += 2
    page.footers()
    return bytes(pdf.output())


def render_contract(facts: ContractFacts) -> RenderedContract:
    markdown = render_markdown(facts)
    return RenderedContract(facts.contract_id, markdown.encode("utf-8"), render_pdf(facts, markdown))
