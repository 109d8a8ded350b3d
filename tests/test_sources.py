"""open_source / open_pdf / doc_id_for / file_digest: classification, ordering and typed errors."""
from __future__ import annotations

import pickle
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from mage_gym.graph.errors import (
    CorruptDocumentError,
    DocumentError,
    EmptyDocumentError,
    EncryptedDocumentError,
    MissingDocumentError,
    UnsupportedSourceError,
)
from mage_gym.graph.schema import DocumentSource
from mage_gym.graph.sources import doc_id_for, file_digest, open_pdf, open_source, page_count

ZERO_PAGE_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF"
)


def _pdf_bytes(n_pages: int = 3) -> bytes:
    doc = pymupdf.open()
    for i in range(n_pages):
        doc.new_page().insert_text((72, 72), f"page {i} text", fontsize=12)
    return doc.tobytes()


@pytest.fixture()
def pdf(tmp_path: Path) -> Path:
    p = tmp_path / "My Report: 2024.pdf"
    p.write_bytes(_pdf_bytes())
    return p


def test_pdf_source_and_page_count(pdf: Path) -> None:
    src = open_source(pdf)
    assert src.kind == "pdf" and Path(src.path) == pdf.resolve()
    assert page_count(src) == 3


def test_doc_id_is_safe_and_stable(pdf: Path, tmp_path: Path) -> None:
    did = doc_id_for(pdf)
    assert did == doc_id_for(open_source(pdf)) == "My_Report_2024"
    assert ":" not in did and " " not in did
    long = tmp_path / ("x" * 200 + ".pdf")
    long.write_bytes(_pdf_bytes(1))
    other = tmp_path / ("x" * 199 + "y.pdf")
    other.write_bytes(_pdf_bytes(1))
    assert len(doc_id_for(long)) <= 96 and doc_id_for(long) != doc_id_for(other)


def test_image_folder_sorted_by_trailing_page_number(tmp_path: Path) -> None:
    folder = tmp_path / "4127"
    folder.mkdir()
    for i in (0, 1, 2, 10, 9, 11):
        Image.new("RGB", (20, 30), (i, i, i)).save(folder / f"4127644_{i}.png")
    (folder / "notes.txt").write_text("not a page")
    src = open_source(folder)
    assert src.kind == "images"
    assert [Path(f).stem for f in src.page_files] == [f"4127644_{i}" for i in (0, 1, 2, 9, 10, 11)]
    assert doc_id_for(src) == doc_id_for(folder) == "4127644"  # LongDocURL doc_no
    assert page_count(src) == 6


def test_glob_selects_one_document_of_a_shared_folder(tmp_path: Path) -> None:
    """LongDocURL folders are named by 4 digits of doc_no, so two documents can share one."""
    folder = tmp_path / "4127"
    folder.mkdir()
    for doc, pages in (("4127644", (0, 1, 10, 2)), ("4127999", (0, 1))):
        for i in pages:
            Image.new("RGB", (20, 30), (i, i, i)).save(folder / f"{doc}_{i}.png")
    pattern = folder / "4127644_*.png"
    src = open_source(pattern)
    assert src.kind == "images" and Path(src.path) == folder.resolve()
    assert [Path(f).stem for f in src.page_files] == ["4127644_0", "4127644_1", "4127644_2", "4127644_10"]
    assert doc_id_for(pattern) == doc_id_for(src) == "4127644" and page_count(src) == 4
    assert open_source(str(pattern)) == src
    with pytest.raises(UnsupportedSourceError, match="matches no page images"):
        open_source(folder / "999_*.png")
    with pytest.raises(MissingDocumentError):
        open_source(tmp_path / "nope" / "4127644_*.png")
    with pytest.raises(UnsupportedSourceError, match="folder"):
        open_source(tmp_path / "41*" / "4127644_*.png")


def test_image_folder_without_numbers_uses_natural_order_and_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / "scan set"
    folder.mkdir()
    for name in ("cover.png", "back.jpg", "appendix.png"):
        Image.new("RGB", (10, 10)).save(folder / name)
    src = open_source(folder)
    assert [Path(f).name for f in src.page_files] == ["appendix.png", "back.jpg", "cover.png"]
    assert doc_id_for(src) == "scan_set"


def test_single_image_is_a_one_page_document(tmp_path: Path) -> None:
    p = tmp_path / "page.png"
    Image.new("RGB", (10, 10)).save(p)
    src = open_source(p)
    assert src.kind == "images" and src.page_files == (str(p.resolve()),)
    assert doc_id_for(p) == "page"


def test_digest_changes_with_bytes_and_page_order(pdf: Path, tmp_path: Path) -> None:
    d1 = file_digest(open_source(pdf))
    assert d1 == file_digest(pdf) and len(d1) == 64
    pdf.write_bytes(_pdf_bytes(4))
    assert file_digest(pdf) != d1
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (10, 10), (255, 0, 0)).save(folder / "p_0.png")
    Image.new("RGB", (10, 10), (0, 255, 0)).save(folder / "p_1.png")
    src = open_source(folder)
    swapped = DocumentSource("images", src.path, tuple(reversed(src.page_files)))
    assert file_digest(src) != file_digest(swapped)


def test_encrypted_pdf_needs_password(tmp_path: Path) -> None:
    doc = pymupdf.open("pdf", _pdf_bytes(2))
    p = tmp_path / "locked.pdf"
    doc.save(p, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="secret", owner_pw="owner")
    with pytest.raises(EncryptedDocumentError) as ei:
        open_source(p)
    assert ei.value.path == str(p.resolve())
    with pytest.raises(EncryptedDocumentError):
        open_pdf(open_source(p, validate=False), password="wrong")
    opened = open_pdf(open_source(p, validate=False), password="secret")
    assert opened.page_count == 2
    opened.close()


@pytest.mark.parametrize(
    "payload, error",
    [
        (b"", CorruptDocumentError),  # zero bytes
        (b"this is not a pdf at all " * 20, CorruptDocumentError),  # garbage named .pdf
        (ZERO_PAGE_PDF, EmptyDocumentError),
    ],
)
def test_bad_pdfs_raise_typed_errors(tmp_path: Path, payload: bytes, error: type) -> None:
    p = tmp_path / "bad.pdf"
    p.write_bytes(payload)
    with pytest.raises(error) as ei:
        open_source(p)
    assert isinstance(ei.value, DocumentError) and ei.value.path.endswith("bad.pdf")


def test_truncated_pdf_is_corrupt_or_repaired(tmp_path: Path) -> None:
    data = _pdf_bytes(3)
    p = tmp_path / "cut.pdf"
    p.write_bytes(data[: len(data) // 4])
    with pytest.raises(CorruptDocumentError):
        open_source(p)
    # a milder truncation is repaired by MuPDF: it opens, flagged as repaired
    p.write_bytes(data[: len(data) // 2])
    doc = open_pdf(open_source(p))
    assert doc.is_repaired and doc.page_count >= 1
    doc.close()


def test_unsupported_and_missing(tmp_path: Path) -> None:
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(UnsupportedSourceError):
        open_source(txt)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(UnsupportedSourceError):
        open_source(empty_dir)
    with pytest.raises(MissingDocumentError) as ei:
        open_source(tmp_path / "nope.pdf")
    assert isinstance(ei.value, FileNotFoundError)


def test_errors_pickle_across_processes() -> None:
    err = EncryptedDocumentError("/x/y.pdf", "PDF is encrypted")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is EncryptedDocumentError and back.path == "/x/y.pdf" and str(back) == str(err)


@pytest.mark.real_data
def test_real_sources(data_root: Path) -> None:
    pdf = data_root / "mmlongbench-dev" / "documents" / "PH_2016.06.08_Economy-Final.pdf"
    src = open_source(pdf)
    assert page_count(src) == 23 and doc_id_for(src) == "PH_2016.06.08_Economy-Final"
    folder = data_root / "longdocurl-sample" / "pdf_pngs" / "4000-4999" / "4127"
    isrc = open_source(folder)
    assert Path(isrc.page_files[10]).name == "4127644_10.png" and doc_id_for(isrc) == "4127644"
