"""Unruled ("text grid") table detection from positioned text lines.

Why: many real tables (financial statements, survey tables, OCR'd scans) have
no ruling lines, so ``find_tables`` (which follows vector lines) cannot see
them, and the fast parser and OCR would otherwise shred them into dozens of
one-number "paragraphs". The rule, from lines alone:

- rows: lines whose vertical extents overlap by > 50% of the shorter one;
- cells: a row split where the horizontal gap exceeds ``max(2% of page width, 10)``;
- a *tabular* row has >= 3 cells, a median cell of <= 6 words and at most one
  cell above 8 words (prose lines in a multi-column page fail this);
- a table is a run of >= 3 tabular rows whose cell counts stay within 2 of
  each other; rows with >= 2 cells inside a run continue it (merged/empty cells).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mage_gym.graph.schema import BBox

MIN_ROWS = 3
MIN_CELLS = 3


@dataclass
class GridTable:
    bbox: BBox
    markdown: str
    members: list[int]  # indices of the input lines inside the table


def _union(boxes: Sequence[BBox]) -> BBox:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def text_grid_tables(lines: Sequence[tuple[BBox, str]], width: float, min_rows: int = MIN_ROWS,
                     min_cells: int = MIN_CELLS) -> list[GridTable]:
    """Tables found among ``lines`` (each ``(bbox, text)``); see the module rule.

    ``min_rows``/``min_cells`` can be lowered where ruling lines or cell
    shading already suggest a table.
    """
    order = sorted(range(len(lines)), key=lambda i: (lines[i][0][1], lines[i][0][0]))
    rows: list[list[int]] = []
    for i in order:
        b = lines[i][0]
        if rows:
            r = rows[-1]
            ry0 = min(lines[j][0][1] for j in r)
            ry1 = max(lines[j][0][3] for j in r)
            ov = min(ry1, b[3]) - max(ry0, b[1])
            if ov > 0.5 * max(min(ry1 - ry0, b[3] - b[1]), 1e-6):
                r.append(i)
                continue
        rows.append([i])
    gap = max(0.02 * width, 10.0)

    def cells(row: list[int]) -> list[list[int]]:
        row = sorted(row, key=lambda j: lines[j][0][0])
        out = [[row[0]]]
        for j in row[1:]:
            if lines[j][0][0] - max(lines[k][0][2] for k in out[-1]) > gap:
                out.append([j])
            else:
                out[-1].append(j)
        return out

    def cell_words(c: list[int]) -> int:
        return len(" ".join(lines[j][1] for j in c).split())

    tables: list[GridTable] = []
    run: list[list[list[int]]] = []

    def flush() -> None:
        n_tabular = sum(1 for r in run if len(r) >= min_cells)
        if len(run) >= min_rows and n_tabular >= min_rows:
            members = [j for r in run for c in r for j in c]
            ncol = max(len(r) for r in run)
            md_rows = ["| " + " | ".join(" ".join(lines[j][1] for j in c) for c in r) + " |" for r in run]
            md = "\n".join([md_rows[0], "|" + "---|" * ncol] + md_rows[1:])
            tables.append(GridTable(_union([lines[j][0] for j in members]), md, members))
        run.clear()

    for row in rows:
        cs = cells(row)
        words = sorted(cell_words(c) for c in cs)
        tabular = len(cs) >= min_cells and words[len(words) // 2] <= 6 and sum(1 for w in words if w > 8) <= 1
        if tabular and run and abs(len(cs) - len(run[-1])) <= 2:
            run.append(cs)
        elif tabular:
            flush()
            run.append(cs)
        elif run and len(cs) >= 2 and len(cs) >= len(run[-1]) - 2 and sum(1 for w in words if w > 8) <= 1:
            run.append(cs)
        else:
            flush()
    flush()
    return tables


__all__ = ["text_grid_tables", "GridTable"]
