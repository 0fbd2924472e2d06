import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import ConfigError, TrainConfig
from trainer.data import (
    DataError,
    Limits,
    iter_prompts,
    load_prompts,
    load_prompts_from_bytes,
    resolve_prompts,
)
from trainer.verifiers import exact_verifier, make_verifier


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_prompt_answer(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [
        {"prompt": "What is 1+1?", "answer": "2", "level": 1},
        {"prompt": "Half of one?", "answer": 0.5},
        {"id": "q3", "prompt": "x", "answer": 3},
    ])
    prompts = load_prompts(path)
    assert [p.answer for p in prompts] == ["2", "0.5", "3"]
    assert prompts[0].metadata == {"level": 1}
    assert prompts[2].id == "q3"
    # Content-based ids: the same file gives the same ids every time.
    assert [p.id for p in load_prompts(path)] == [p.id for p in prompts]
    assert len({p.id for p in prompts}) == 3


def test_duplicate_problems_get_distinct_ids(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}] * 2)
    a, b = load_prompts(path)
    assert a.id != b.id


VERL_ROW = {
    "data_source": "openai/gsm8k",
    "prompt": [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "What is 2+3?"}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "5"},
    "extra_info": {"index": 0},
}


def test_verl_layout_jsonl_and_parquet(tmp_path: Path) -> None:
    (p,) = load_prompts(_jsonl(tmp_path / "v.jsonl", [VERL_ROW]))
    assert (p.text, p.answer) == ("What is 2+3?", "5")
    assert p.metadata["data_source"] == "openai/gsm8k"
    assert p.metadata["chat"] == VERL_ROW["prompt"]  # for the model's chat template
    pq.write_table(pa.Table.from_pylist([VERL_ROW, VERL_ROW | {"extra_info": {"index": 1}}]),
                   tmp_path / "v.parquet")
    prompts = load_prompts(tmp_path / "v.parquet")
    assert [(q.text, q.answer) for q in prompts] == [("What is 2+3?", "5")] * 2


def test_parquet_prompt_answer_and_bytes(tmp_path: Path) -> None:
    table = pa.table({"prompt": ["1+1=", "2+2="], "answer": ["2", "4"]})
    pq.write_table(table, tmp_path / "d.parquet")
    data = (tmp_path / "d.parquet").read_bytes()
    prompts = load_prompts_from_bytes(data, "upload.parquet")
    assert [(p.text, p.answer) for p in prompts] == [("1+1=", "2"), ("2+2=", "4")]


@pytest.mark.parametrize(
    ("rows", "location", "reason"),
    [
        ([{"prompt": "a", "answer": "1"}, "{not json"], "line 2", "bad JSON"),
        ([{"prompt": "a", "answer": "1"}, {"answer": "1"}], "line 2", "missing field 'prompt'"),
        ([{"prompt": "a"}], "line 1", "missing field 'answer'"),
        ([{"prompt": "a", "answer": "1"}, {"prompt": "  ", "answer": "1"}], "line 2",
         "empty prompt"),
        ([{"prompt": 5, "answer": "1"}], "line 1", "'prompt' must be a string"),
        ([{"prompt": "a", "answer": [1]}], "line 1", "'answer' must be a string or a number"),
        ([[1, 2]], "line 1", "expected an object"),
        ([{"prompt": [{"role": "system", "content": "x"}], "answer": "1"}], "line 1",
         "no user message"),
        ([{"id": "a", "prompt": "a", "answer": "1"}, {"id": "a", "prompt": "b", "answer": "2"}],
         "line 2", "duplicate id"),
    ],
)
def test_malformed_jsonl_rejected_whole(tmp_path: Path, rows: list, location: str,
                                        reason: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=reason) as exc:
        load_prompts(path)
    assert exc.value.location == location
    assert location in str(exc.value)


def test_malformed_parquet_names_the_row_counted_from_1_as_jsonl_lines(tmp_path: Path) -> None:
    """The same records as Parquet and as JSONL name the same place: the second record is
    "row 2" and "line 2" (issue 27: Parquet counted rows from 0, JSONL lines from 1)."""
    records = {"prompt": ["1+1=", "", "3+3="], "answer": ["2", "4", "6"]}
    pq.write_table(pa.table(records), tmp_path / "d.parquet")
    _jsonl(tmp_path / "d.jsonl", [{"prompt": p, "answer": a}
                                  for p, a in zip(records["prompt"], records["answer"],
                                                  strict=True)])
    with pytest.raises(DataError, match="row 2: empty prompt") as parquet:
        load_prompts(tmp_path / "d.parquet")
    with pytest.raises(DataError, match="line 2: empty prompt") as jsonl:
        load_prompts(tmp_path / "d.jsonl")
    assert (parquet.value.location, jsonl.value.location) == ("row 2", "line 2")
    # A chat's messages are counted from 1 too.
    chat = [{"role": "user", "content": "1+1="}, {"role": 7}]
    _jsonl(tmp_path / "c.jsonl", [{"prompt": chat, "answer": "2"}])
    with pytest.raises(DataError, match="line 1: 'prompt' chat message 2 must be"):
        load_prompts(tmp_path / "c.jsonl")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        load_prompts_from_bytes(b"garbage", "x.parquet")


def test_unknown_suffix_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown file type"):
        load_prompts_from_bytes(b"", "data.csv")
    with pytest.raises(DataError, match="no prompts"):
        load_prompts_from_bytes(b"\n\n", "data.jsonl")


class CountingStream(io.RawIOBase):
    """A file that counts the bytes it handed out."""

    def __init__(self, data: bytes) -> None:
        self.inner, self.served = io.BytesIO(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:
        n = self.inner.readinto(buffer)
        self.served += n
        return n


def test_jsonl_streams_line_by_line() -> None:
    data = b"".join(b'{"prompt": "%d+1=", "answer": "%d"}\n' % (i, i + 1) for i in range(50_000))
    raw = CountingStream(data)
    prompts = iter_prompts(io.BufferedReader(raw), "big.jsonl")
    first = next(prompts)
    assert first.text == "0+1=" and raw.served < len(data) // 10
    assert sum(1 for _ in prompts) == 49_999


def test_jsonl_lines_end_at_newlines_only() -> None:
    # U+2028 is a line break to str.splitlines(), and legal inside a JSON string.
    (p,) = load_prompts_from_bytes('{"prompt": "a\u2028b", "answer": "1"}\n'.encode(), "x.jsonl")
    assert p.text == "a\u2028b"


def test_row_limit_names_the_line_and_the_limit() -> None:
    data = b'{"prompt": "1+1=", "answer": "2"}\n' * 4
    assert len(load_prompts_from_bytes(data, "x.jsonl", limits=Limits(max_rows=4))) == 4
    with pytest.raises(DataError) as exc:
        load_prompts_from_bytes(data + data, "x.jsonl", limits=Limits(max_rows=4))
    assert str(exc.value) == "x.jsonl, line 5: more than 4 prompts; the limit is 4"


def test_parquet_limits_are_checked_on_the_metadata_first(tmp_path: Path) -> None:
    rows = [{"prompt": "9" * 1000 + f"+{i}=", "answer": "1"} for i in range(500)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet", compression="zstd")
    assert (tmp_path / "p.parquet").stat().st_size < 32_000  # about 0.5 MB uncompressed
    with pytest.raises(DataError, match="metadata declares 500 rows; the limit is 499"):
        load_prompts(tmp_path / "p.parquet", Limits(max_rows=499))
    with pytest.raises(DataError, match=r"metadata declares 0\.\d MiB of data uncompressed; "
                       r"the limit is 0\.1 MiB"):
        load_prompts(tmp_path / "p.parquet", Limits(max_uncompressed_bytes=100_000))
    assert len(load_prompts(tmp_path / "p.parquet", Limits(500, 2**20))) == 500


def test_resolve_builtin_eval_is_disjoint_from_train() -> None:
    cfg = TrainConfig(task_num_prompts=300, eval_num_prompts=50)
    train, evals = resolve_prompts(cfg)
    assert len(train) == 300 and len(evals) == 50
    assert not {p.text for p in train} & {p.text for p in evals}
    # The prompt sets do not depend on the run's seed: runs stay comparable.
    cfg2 = TrainConfig(task_num_prompts=300, eval_num_prompts=50, seed=9)
    assert resolve_prompts(cfg2) == (train, evals)


def test_resolve_files(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}])
    train, evals = resolve_prompts(TrainConfig(prompts=str(path)))
    assert len(train) == 1 and evals == []
    train, evals = resolve_prompts(TrainConfig(prompts=str(path), eval_prompts=str(path)))
    assert len(evals) == 1


def test_resolve_builtin_long_task() -> None:
    cfg = TrainConfig(prompts="builtin:arithmetic-long", task_num_prompts=300,
                      eval_num_prompts=50).validate()
    train, evals = resolve_prompts(cfg)
    assert len(train) == 300 and len(evals) == 50
    assert {p.metadata["task"] for p in train + evals} == {"arithmetic-long"}
    assert not {p.text for p in train} & {p.text for p in evals}
    assert resolve_prompts(cfg) == (train, evals)
    assert make_verifier(cfg) is exact_verifier
    # Evaluating a plain-task run on the long variant: held out from the shared 2-operand sums.
    train, evals = resolve_prompts(TrainConfig(task_num_prompts=300, eval_num_prompts=50,
                                               eval_prompts="builtin:arithmetic-long"))
    assert {p.metadata["task"] for p in evals} == {"arithmetic-long"}
    assert not {p.text for p in train} & {p.text for p in evals}


def test_long_task_digit_limit_names_the_field() -> None:
    with pytest.raises(ConfigError, match="task_max_digits: must be <= 4 with "
                                          "builtin:arithmetic-long"):
        TrainConfig(prompts="builtin:arithmetic-long", task_max_digits=5).validate()
    TrainConfig(prompts="builtin:arithmetic", task_max_digits=9).validate()


@pytest.mark.parametrize(("line", "where"), [
    # Cut short: the decoder fails past the text, where the line ending used to put it on
    # "line 2, column 1" of the one-line document.
    ('{"prompt": "12+34=", "answer":', "at the end of the line (after column 30)"),
    ('{"prompt": "12+34=" "answer": "64"}', "at column 21 of 35"),
    ('{"prompt": "12+34=", "answer": "64"}}', "at column 37 of 37"),
])
def test_bad_json_names_the_column_of_its_own_line(tmp_path: Path, line: str,
                                                   where: str) -> None:
    for ending in ("\n", "\r\n"):
        path = tmp_path / "bad.jsonl"
        path.write_text('{"prompt": "1+1=", "answer": "2"}' + ending + line + ending,
                        newline="")
        with pytest.raises(DataError) as exc:
            load_prompts(path)
        assert exc.value.location == "line 2"
        assert exc.value.reason.endswith(where), exc.value.reason
        assert "column 1" not in exc.value.reason
