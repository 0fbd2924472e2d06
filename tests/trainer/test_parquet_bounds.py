"""A Parquet file is decoded in bounded memory (issue 19): a 788-byte file whose dictionary
column repeats one 1.3 MB string on 4,096 rows once grew the web worker by 1.36 GB before the
decoded-size limit was checked. Each row's decoded size is now computed from the Arrow data before
any row becomes Python objects, and rows are expanded a few MiB at a time."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.data import PARQUET_SLICE_BYTES, DataError, Limits, iter_prompts

ROOT = Path(__file__).resolve().parents[2]
BOUND_MIB = 64  # the peak memory growth a bomb may cause


def _bomb(rows: int = 4096, size: int = 1_300_000, arrow_dictionary: bool = True) -> bytes:
    """One long string on every row, stored by Parquet as a dictionary of one entry: with the
    Arrow schema's dictionary type (pandas' categorical), or as a plain string column, which
    Arrow expands on reading unless asked for the dictionary (issue 32's 757-byte file)."""
    prompt = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                            pa.array(["7" * size]))
    out = io.BytesIO()
    # Without the Arrow schema the file is what a plain string column makes (written from the
    # dictionary here: the same bytes, without expanding 600 MB to write them).
    pq.write_table(pa.table({"prompt": prompt, "answer": ["1"] * rows}), out,
                   compression="zstd", compression_level=22, store_schema=arrow_dictionary)
    return out.getvalue()


MEASURE = """
import resource, sys
import numpy, pyarrow.compute, pyarrow.parquet  # imported before the baseline: not the bomb's
from trainer.data import DataError, Limits, iter_prompts
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    sum(1 for _ in iter_prompts(open(sys.argv[1], "rb"), "bomb.parquet",
                                limits=Limits(max_rows=100_000,
                                              max_uncompressed_bytes=64 * 2**20)))
    print("accepted")
except DataError as exc:
    print("refused:", exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


@pytest.mark.parametrize("arrow_dictionary", [True, False])
def test_a_dictionary_bomb_is_refused_in_bounded_memory(tmp_path: Path,
                                                        arrow_dictionary: bool) -> None:
    data = _bomb(arrow_dictionary=arrow_dictionary) if arrow_dictionary else _bomb(
        rows=300, size=2 * 2**20, arrow_dictionary=False)
    assert len(data) < 1024  # the attack: under a kilobyte on the wire
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.row_group(0).total_byte_size < 64 * 2**20  # it passes the metadata check
    (tmp_path / "bomb.parquet").write_bytes(data)
    # A fresh interpreter: its peak resident size is the bomb's alone.
    out = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "bomb.parquet")],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0].startswith("refused: bomb.parquet, row ")
    assert "the rows decode to more than 64.0 MiB, the limit" in out[0]
    assert float(out[1]) < BOUND_MIB, f"peak memory grew by {out[1]} MiB"


@pytest.mark.parametrize("dictionary", [True, False])
def test_rows_are_all_read_in_order_across_slices(dictionary: bool) -> None:
    """Rows wider than a slice, dictionary-encoded or not, and a verl chat column: every row
    comes back once, in order, with its values."""
    width = PARQUET_SLICE_BYTES // 3
    texts = [f"{i}+{i}=" + "x" * (width if i % 5 == 0 else 10) for i in range(40)]
    prompt = (pa.array(texts).dictionary_encode() if dictionary else pa.array(texts))
    chat = [[{"role": "user", "content": t}] for t in texts]
    out = io.BytesIO()
    pq.write_table(pa.table({"prompt": prompt, "answer": [str(2 * i) for i in range(40)],
                             "chat_copy": chat}), out)
    got = list(iter_prompts(io.BytesIO(out.getvalue()), "ok.parquet",
                            limits=Limits(max_uncompressed_bytes=256 * 2**20)))
    assert [p.text for p in got] == texts
    assert [p.answer for p in got] == [str(2 * i) for i in range(40)]
    assert got[7].metadata["chat_copy"] == [{"role": "user", "content": texts[7]}]


def test_the_decoded_limit_counts_every_row() -> None:
    """A file within the metadata check whose rows decode past the limit is refused naming the
    first row past it."""
    out = io.BytesIO()
    pq.write_table(pa.table({"prompt": pa.array(["y" * 100_000] * 30).dictionary_encode(),
                             "answer": ["1"] * 30}), out)
    with pytest.raises(DataError, match=r"row 21: the rows decode to more than 2\.0 MiB"):
        list(iter_prompts(io.BytesIO(out.getvalue()), "x.parquet",
                          limits=Limits(max_uncompressed_bytes=2 * 2**20)))


def test_a_record_past_its_limit_is_refused_before_it_is_decoded() -> None:
    """``Limits.max_record_bytes``: a Parquet row's decoded size (from the dictionary, before the
    row is expanded), its average from the metadata, and a JSONL line, read no further than the
    limit."""
    data = _bomb(rows=300, size=2 * 2**20, arrow_dictionary=False)
    with pytest.raises(DataError, match=r"row 1: decodes to 2\.0 MiB, more than 1\.0 MiB, the "
                                        r"limit of one record"):
        list(iter_prompts(io.BytesIO(data), "b.parquet", limits=Limits(max_record_bytes=2**20)))
    wide = io.BytesIO()
    pq.write_table(pa.table({"prompt": ["8" * 300_000], "answer": ["1"]}), wide,
                   use_dictionary=False)
    with pytest.raises(DataError, match=r"metadata declares rows of 29\d\.\d KiB on average in "
                                        r"row group 1; the limit of one record is 64\.0 KiB"):
        list(iter_prompts(io.BytesIO(wide.getvalue()), "w.parquet",
                          limits=Limits(max_record_bytes=64 * 2**10)))

    class Counting(io.BytesIO):
        read_bytes = 0

        def readline(self, size: int | None = -1) -> bytes:
            line = super().readline(size)
            Counting.read_bytes += len(line)
            return line

    line = b'{"prompt": "' + b"9" * (49 * 10**6) + b'", "answer": "1"}\n'
    with pytest.raises(DataError, match=r"x\.jsonl, line 1: longer than 1\.0 MiB, the limit of "
                                        r"one record"):
        list(iter_prompts(Counting(line), "x.jsonl", limits=Limits(max_record_bytes=2**20)))
    assert Counting.read_bytes == 2**20 + 1  # a record's worth of the 49 MB line, no more


def test_a_prompt_past_its_limit_is_refused_naming_it() -> None:
    data = b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "' + b"5" * 101 + b'", "answer": 1}\n'
    with pytest.raises(DataError, match=r"y\.jsonl, line 2: the prompt is 101 characters; the "
                                        r"limit is 100 characters per prompt"):
        list(iter_prompts(io.BytesIO(data), "y.jsonl", limits=Limits(max_prompt_chars=100)))
