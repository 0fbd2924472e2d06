"""``manage.py import_run`` of a bundle's zip, bounded (issue 32, item 2): a 1 MB bundle once wrote
1 GiB to the temporary folder, and a bundle's Parquet files are decompressed in the command's
own process. The unzipped size is bounded by what the entries declare (in all, and as a ratio
to the zip's size) and by what they actually write; the import's memory growth by an
address-space cap while it runs."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from experiments.imports import ImportError_, import_run, memory_budget
from experiments.models import PromptSet, Run

from tests.fixtures.services import ROOT, worker_database_url

pytestmark = pytest.mark.django_db

PAGE_BOMB = ROOT / "tests" / "fixtures" / "data" / "page_bomb.parquet"


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the import unzips into, to see what it wrote."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def written(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def test_a_zip_bomb_is_refused_before_a_byte_is_written(tmp_path: Path, temp_root: Path,
                                                        settings: Any) -> None:
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open("samples.parquet", "w") as entry:
            for _ in range(128):
                entry.write(bytes(2**20))  # 128 MiB of zeros
        zf.writestr("manifest.json", "{}")
    assert bomb.stat().st_size < 2**20
    user = User.objects.create_user("ops")
    with pytest.raises(ImportError_, match=r"bomb\.zip: its entries declare 128\.0 MiB unzipped "
                                           r"from [\d,]+ bytes, [\d,]+ times its size; the limit "
                                           r"is 10 times \(IMPORT_BUNDLE_MAX_RATIO\)"):
        import_run(bomb, user)
    assert written(temp_root) == 0
    # The sum of the declared sizes, whatever the ratio.
    settings.IMPORT_BUNDLE_MAX_RATIO = 10_000
    settings.IMPORT_BUNDLE_MAX_BYTES = 64 * 2**20
    with pytest.raises(ImportError_, match=r"the limit is 64\.0 MiB \(IMPORT_BUNDLE_MAX_BYTES\)"):
        import_run(bomb, user)
    assert written(temp_root) == 0 and not Run.objects.exists()


def test_an_entry_that_unzips_past_what_it_declares_is_refused(tmp_path: Path,
                                                               temp_root: Path) -> None:
    """The central directory says 10 bytes; the data holds 1 MiB. zipfile reads no further than
    the declared size and the entry fails its checksum: refused, never written past 10
    bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", b"{" + b" " * (2**20) + b"}")
    data = bytearray(buf.getvalue())
    # The central directory's uncompressed size (offset 24 of its entry) rewritten to 10.
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (10).to_bytes(4, "little")
    lying = tmp_path / "lying.zip"
    lying.write_bytes(bytes(data))
    with pytest.raises(ImportError_, match=r"lying\.zip: entry 'config\.json': Bad CRC-32"):
        import_run(lying, User.objects.create_user("ops"))
    assert written(temp_root) <= 10


def test_the_imports_memory_is_capped_while_it_runs(transactional_db: None, tmp_path: Path) -> None:
    """A bundle whose prompts.parquet decompresses one 256 MiB value (a 9 KB file) with a
    budget of 128 MiB: refused naming the limit, nothing stored. ``manage.py import_run`` runs
    in a fresh interpreter, as an operator runs it: the cap bounds growth of the address space,
    and a long-lived process (this suite's) may already hold enough freed arena space for the
    value, which then decodes without growing it."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({
        "format": "rada-run-bundle", "version": 1, "run": {
            "id": 1, "name": "b", "algorithm": "grpo", "model": "builtin:tiny", "seed": 0,
            "queue": "cpu", "retention": "all", "total_steps": 1, "status": "succeeded",
            "prompt_set": {"id": 1, "name": "p", "source": "upload"}}}))
    (folder / "config.json").write_text("{}")
    (folder / "prompts.parquet").write_bytes(PAGE_BOMB.read_bytes())
    User.objects.create_superuser("root")
    env = {**os.environ, "DATABASE_URL": worker_database_url(),
           "IMPORT_RUN_MAX_MEMORY_BYTES": str(128 * 2**20),
           "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}"}
    out = subprocess.run([sys.executable, "manage.py", "import_run", str(folder)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert re.search(r"dir: .*bundle: importing it needed more than 0\.1 GiB of memory, the "
                     r"limit \(IMPORT_RUN_MAX_MEMORY_BYTES\)", out.stderr), out.stderr[-2000:]
    assert not Run.objects.exists() and not PromptSet.objects.exists()


def test_the_memory_budget_is_lifted_after_its_block() -> None:
    with memory_budget(64 * 2**20), pytest.raises(MemoryError):
        bytearray(1024 * 2**20)  # more than any freed arena this process may hold
    assert len(bytearray(256 * 2**20)) == 256 * 2**20  # the cap is gone
