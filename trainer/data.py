"""Prompt files: JSONL and Parquet with ``prompt`` and ``answer`` columns, or the verl layout
(``prompt`` a chat list of ``{role, content}``, answer in ``reward_model.ground_truth``).

A malformed file is rejected whole, naming the line (JSONL) or row (Parquet), both counted from
1, and the reason: a training run must never silently train on part of a dataset. The web
platform streams uploads through ``iter_prompts`` with ``Limits``, so this module imports
neither torch nor transformers (pyarrow is imported only for Parquet files).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from trainer import jsonsafe
from trainer.types import Prompt

if TYPE_CHECKING:
    from trainer.config import TrainConfig

SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
            ".pq": "parquet"}
# Fixed seeds for the built-in task's prompt sets: every run (any seed, any algorithm) trains and
# evaluates on the same problems, so runs are comparable and eval stays disjoint from training.
BUILTIN_TRAIN_SEED = 0
BUILTIN_EVAL_SEED = 1


class DataError(ValueError):
    """A prompt file that cannot be used. ``location`` is e.g. "line 3" (JSONL) or "row 7"
    (Parquet), counted from 1, or "" for a problem with the whole file."""

    def __init__(self, source: str, location: str, reason: str) -> None:
        where = f"{source}, {location}" if location else source
        super().__init__(f"{where}: {reason}")
        self.source = source
        self.location = location
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """Bounds on a prompt file, checked while it is read (None: unbounded). The web platform sets
    them for uploads; the CLI reads the user's own files unbounded."""

    max_rows: int | None = None
    # Parquet: the uncompressed size the file's metadata declares, checked before decompressing,
    # and the size of the decoded rows, checked as they stream.
    max_uncompressed_bytes: int | None = None
    # One record: a JSONL line's bytes (read no further than this), a Parquet row's decoded size
    # (computed before the row is expanded).
    max_record_bytes: int | None = None
    # One prompt's text, in characters.
    max_prompt_chars: int | None = None


def load_prompts(path: str | Path, limits: Limits = Limits()) -> list[Prompt]:
    """All prompts of a JSONL or Parquet file (format from the suffix)."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            return list(iter_prompts(stream, path.name, source=str(path), limits=limits))
    except OSError as exc:
        raise DataError(str(path), "", f"cannot read: {exc.strerror or exc}") from exc


def load_prompts_from_bytes(data: bytes, filename: str, source: str | None = None,
                            limits: Limits = Limits()) -> list[Prompt]:
    """Parse an uploaded file's bytes; ``filename``'s suffix picks the format."""
    return list(iter_prompts(io.BytesIO(data), filename, source=source, limits=limits))


def iter_prompts(stream: BinaryIO, filename: str, source: str | None = None,
                 limits: Limits = Limits()) -> Iterator[Prompt]:
    """The prompts of a JSONL or Parquet file, one at a time, in bounded memory: JSONL is read
    line by line, Parquet a batch of rows at a time after its metadata passed ``limits``. The
    first problem raises ``DataError`` (a consumer storing the prompts must discard what it
    stored: a file is used whole or not at all)."""
    source = source or filename
    kind = SUFFIXES.get(Path(filename).suffix.lower())
    if kind is None:
        raise DataError(source, "", f"unknown file type {Path(filename).suffix!r}; use .jsonl "
                        "or .parquet")
    records = (_jsonl_records(stream, source, limits.max_record_bytes) if kind == "jsonl"
               else _parquet_records(stream, source, limits))
    used_ids: set[str] = set()
    count = 0
    for location, record in records:
        count += 1
        if limits.max_rows is not None and count > limits.max_rows:
            raise DataError(source, location, f"more than {limits.max_rows:,} prompts; the "
                            f"limit is {limits.max_rows:,}")
        yield _to_prompt(record, source, location, used_ids, limits.max_prompt_chars)
    if not count:
        raise DataError(source, "", "no prompts in file")


def _jsonl_records(stream: BinaryIO, source: str, max_line: int | None
                   ) -> Iterator[tuple[str, Any]]:
    # Split on "\n" only, as JSONL does: str.splitlines() would also split inside a JSON string
    # holding U+2028. A line is read no further than the record limit: a one-line file of 49 MB
    # is refused after reading a record's worth of it, not held whole.
    number = 0
    while raw := (stream.readline(max_line + 1) if max_line is not None else stream.readline()):
        number += 1
        if max_line is not None and len(raw.rstrip(b"\r\n")) > max_line:
            raise DataError(source, f"line {number}", f"longer than {_size(max_line)}, the "
                            "limit of one record")
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(source, f"line {number}", "not valid UTF-8") from exc
        if not line.strip():
            continue  # blank lines (a trailing newline, spacing) are harmless
        # Without its line ending: a line cut short would otherwise fail past the newline, and
        # the decoder would report "line 2, column 1" of a one-line document.
        line = line.rstrip("\r\n")
        try:
            record = jsonsafe.loads(line)
        except json.JSONDecodeError as exc:
            where = (f"at the end of the line (after column {len(line)})"
                     if exc.pos >= len(line) else f"at column {exc.pos + 1} of {len(line)}")
            raise DataError(source, f"line {number}", f"bad JSON: {exc.msg} {where}") from exc
        except ValueError as exc:  # nested too deeply; an integer of more than 4,300 digits
            raise DataError(source, f"line {number}", f"bad JSON: {exc}") from exc
        yield f"line {number}", record


def _parquet_records(stream: BinaryIO, source: str, limits: Limits
                     ) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(stream)  # reads the footer only
        # A string column stored with a dictionary is read as one (its values once, indices per
        # row), not expanded: 300 rows of one 2 MiB string in a 757-byte file decoded to 600 MiB
        # in a single batch before any limit was checked. Its rows' sizes are computed from the
        # dictionary below, before any row is expanded.
        dictionary_columns = _dictionary_columns(parquet)
        if dictionary_columns:
            stream.seek(0)
            parquet = pq.ParquetFile(stream, read_dictionary=dictionary_columns)
    except MemoryError:  # Arrow's too: the caller's memory bound, not the file's format
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(source, "", f"not a readable Parquet file: {exc}") from exc
    meta = parquet.metadata
    if limits.max_rows is not None and meta.num_rows > limits.max_rows:
        raise DataError(source, "", f"the file's metadata declares {meta.num_rows:,} rows; the "
                        f"limit is {limits.max_rows:,}")
    # RowGroup.total_byte_size: the uncompressed size of the row group's column data.
    declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    cap = limits.max_uncompressed_bytes
    if cap is not None and declared > cap:
        raise DataError(source, "", f"the file's metadata declares {_mib(declared)} of data "
                        f"uncompressed; the limit is {_mib(cap)}")
    record_cap = limits.max_record_bytes
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        # Rows averaging past the limit of one record hold one past it: refused from the
        # metadata, before a page is decompressed (a file whose metadata lies is bounded by the
        # process that parses it).
        if record_cap is not None and group.total_byte_size > record_cap * group.num_rows:
            raise DataError(source, "", f"the file's metadata declares rows of "
                            f"{_size(group.total_byte_size // max(group.num_rows, 1))} on average "
                            f"in row group {i + 1}; the limit of one record is "
                            f"{_size(record_cap)}")
    # Rows per batch from the declared size of a row, so a batch of wide rows stays near
    # PARQUET_SLICE_BYTES when decoded (a dictionary-encoded column is read as a dictionary: its
    # batch is small whatever the rows expand to).
    per_row = declared / max(meta.num_rows, 1)
    batch_rows = int(min(1024, max(1, PARQUET_SLICE_BYTES // max(per_row, 1))))
    decoded = 0
    row = 1  # counted from 1, as JSONL's lines are
    try:
        # One thread: a failed allocation in a worker thread of Arrow's pool can hang the read
        # (the platform parses uploads under a memory cap); in this thread it raises.
        for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
            # Metadata can lie, and a dictionary column of one long string repeated on every
            # row declares one string: each row's decoded size is computed before any row is
            # turned into Python objects, and the rows are expanded a bounded slice at a time.
            sizes = _row_sizes(batch)
            if record_cap is not None and batch.num_rows and int(sizes.max()) > record_cap:
                first = int((sizes > record_cap).argmax())
                raise DataError(source, f"row {row + first}", f"decodes to "
                                f"{_size(int(sizes[first]))}, more than {_size(record_cap)}, the "
                                "limit of one record")
            start = 0
            while start < batch.num_rows:
                end, slice_bytes = start, 0
                while end < batch.num_rows and (end == start
                                                or slice_bytes + sizes[end] <= PARQUET_SLICE_BYTES):
                    slice_bytes += int(sizes[end])
                    if cap is not None and decoded + slice_bytes > cap:
                        raise DataError(source, f"row {row + end - start}", "the rows decode to "
                                        f"more than {_mib(cap)}, the limit")
                    end += 1
                decoded += slice_bytes
                for record in batch.slice(start, end - start).to_pylist():
                    yield f"row {row}", record
                    row += 1
                start = end
    except MemoryError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise DataError(source, f"row {row}", f"not a readable Parquet file: {exc}") from exc


# Parquet rows are turned into Python objects at most this many decoded bytes at a time.
PARQUET_SLICE_BYTES = 4 * 2**20


def _dictionary_columns(parquet: Any) -> list[str]:
    """The paths of the byte-array (string) columns some row group stores with a dictionary
    page."""
    meta = parquet.metadata
    schema = parquet.schema
    found = []
    for j in range(len(schema)):
        column = schema.column(j)
        if column.physical_type != "BYTE_ARRAY":
            continue
        if any(meta.row_group(i).column(j).has_dictionary_page
               for i in range(meta.num_row_groups)):
            found.append(column.path)
    return found


def _row_sizes(batch: Any) -> Any:
    """Each row's decoded size in bytes (an int64 array), computed from the Arrow data without
    decoding it: a dictionary column's rows are its entries' sizes, a string's its length, a
    list's the sum of its items'."""
    import numpy as np

    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        sizes += _array_sizes(column)
    return sizes


def _array_sizes(array: Any) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    n = len(array)
    if pa.types.is_dictionary(kind):
        entries = _array_sizes(array.dictionary)
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return entries[indices] if len(entries) else np.zeros(n, dtype=np.int64)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        return pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False
                                                             ).astype(np.int64) + 8
    if pa.types.is_struct(kind):
        sizes = np.full(n, 8, dtype=np.int64)
        for i in range(kind.num_fields):
            sizes += _array_sizes(array.field(i))
        return sizes
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        items = _array_sizes(array.values)
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        totals = np.concatenate([[0], np.cumsum(items)])
        return totals[offsets[1:]] - totals[offsets[:-1]] + 8
    return np.full(n, max(kind.bit_width // 8, 1) if hasattr(kind, "bit_width") else 8,
                   dtype=np.int64)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB" if n >= 2**10 \
        else f"{n:,} bytes"


def _to_prompt(record: Any, source: str, location: str, used_ids: set[str],
               max_prompt_chars: int | None = None) -> Prompt:
    def fail(reason: str) -> DataError:
        return DataError(source, location, reason)

    if not isinstance(record, Mapping):
        raise fail(f"expected an object with 'prompt' and 'answer', got {type(record).__name__}")
    # Text that is not Unicode, NaN or infinities, nesting past jsonsafe.MAX_DEPTH: refused here,
    # with the line, not by the database that stores the prompt (or a tokenizer later).
    problem = jsonsafe.first_problem(dict(record))
    if problem:
        raise fail(f"field '{problem[0]}' {problem[1]}")
    if "prompt" not in record or record["prompt"] is None:
        raise fail("missing field 'prompt'")
    text = _prompt_text(record["prompt"], fail)
    if max_prompt_chars is not None and len(text) > max_prompt_chars:
        raise fail(f"the prompt is {len(text):,} characters; the limit is "
                   f"{max_prompt_chars:,} characters per prompt")
    if not text.strip():
        raise fail("empty prompt")
    answer = _answer(record, fail)
    if not answer.strip():
        raise fail("empty answer")
    metadata = {k: v for k, v in record.items()
                if k not in ("prompt", "answer", "id") and _jsonable(v)}
    if isinstance(record["prompt"], list):
        # Kept so that generation can apply the model's chat template to the whole chat.
        metadata["chat"] = [{"role": m["role"], "content": m["content"]} for m in record["prompt"]]
    prompt_id = _prompt_id(record, text, answer, fail)
    if prompt_id in used_ids:
        if "id" in record:
            raise fail(f"duplicate id {prompt_id!r}")
        # The same problem twice without ids: keep both, with distinct derived ids.
        k = 2
        while f"{prompt_id}-{k}" in used_ids:
            k += 1
        prompt_id = f"{prompt_id}-{k}"
    used_ids.add(prompt_id)
    return Prompt(id=prompt_id, text=text, answer=answer, metadata=metadata)


def _prompt_text(value: Any, fail: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # verl layout: a chat; the question is the (last) user message.
        for i, message in enumerate(value, start=1):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) \
                    or not isinstance(message.get("content"), str):
                raise fail(f"'prompt' chat message {i} must be an object with string 'role' and "
                           "'content'")
        users = [m["content"] for m in value if m["role"] == "user"]
        if not users:
            raise fail("'prompt' chat list has no user message")
        return users[-1]
    raise fail(f"'prompt' must be a string or a chat list, got {type(value).__name__}")


def _answer(record: Mapping[str, Any], fail: Any) -> str:
    if "answer" in record and record["answer"] is not None:
        value, name = record["answer"], "answer"
    else:
        reward_model = record.get("reward_model")
        if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") is not None:
            value, name = reward_model["ground_truth"], "reward_model.ground_truth"
        else:
            raise fail("missing field 'answer' (or verl's 'reward_model.ground_truth')")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise fail(f"'{name}' must be a string or a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(f"'{name}' is not a finite number")
    return value if isinstance(value, str) else str(value)


def _prompt_id(record: Mapping[str, Any], text: str, answer: str, fail: Any) -> str:
    if "id" in record and record["id"] is not None:
        value = record["id"]
        if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
            raise fail("'id' must be a non-empty string or an integer")
        return str(value)
    # Content-based, so the same file gives the same ids in every run (resume, comparisons).
    return "p-" + hashlib.sha1(f"{text}\0{answer}".encode()).hexdigest()[:12]


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def resolve_prompts(config: TrainConfig) -> tuple[list[Prompt], list[Prompt]]:
    """(training prompts, evaluation prompts) for a run.

    A built-in task (``builtin:arithmetic``, ``builtin:arithmetic-long``) draws
    ``task_num_prompts`` training problems and, unless ``eval_prompts`` names a file,
    ``eval_num_prompts`` held-out problems of ``eval_prompts``' task (default: the training task)
    disjoint from them. A file of training prompts has no eval set unless ``eval_prompts`` names
    one.
    """
    from trainer.config import BUILTIN_TASKS

    if config.prompts in BUILTIN_TASKS:
        train = builtin_prompts(config.prompts, config.task_num_prompts, config,
                                seed=BUILTIN_TRAIN_SEED)
    else:
        train = load_prompts(config.prompts)
    if config.eval_prompts and config.eval_prompts not in BUILTIN_TASKS:
        evals = load_prompts(config.eval_prompts)
    elif config.eval_prompts in BUILTIN_TASKS or config.prompts in BUILTIN_TASKS:
        # Both tasks share the 2-operand problems, so the exclusion holds across them too.
        exclude = {p.text for p in train} if config.prompts in BUILTIN_TASKS else set()
        evals = builtin_prompts(config.eval_prompts or config.prompts, config.eval_num_prompts,
                                config, seed=BUILTIN_EVAL_SEED, exclude=exclude
                                ) if config.eval_num_prompts else []
    else:
        evals = []
    return train, evals


def builtin_prompts(task: str, n: int, config: TrainConfig, seed: int,
                    exclude: set[str] | frozenset[str] = frozenset()) -> list[Prompt]:
    """``n`` problems of the built-in ``task`` with the config's operand digits."""
    from trainer.config import BUILTIN_TASK
    from trainer.tasks import arithmetic_long_prompts, arithmetic_prompts

    make = arithmetic_prompts if task == BUILTIN_TASK else arithmetic_long_prompts
    return make(n, config.task_min_digits, config.task_max_digits, seed=seed, exclude=exclude)
