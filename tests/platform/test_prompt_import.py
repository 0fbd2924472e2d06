"""Uploaded prompt files (issue 32, items 2 and 6): parsed by a child process that caps its own
memory and CPU time (a 757-byte Parquet file once cost the web worker 1.4 GB, four at once
3.5 GB), off the request thread with its progress on the set's page (a 1-million-row upload held
a web thread for 35 s), one prompt at most PROMPT_MAX_CHARS long, and previews wherever prompts
are listed (a 49 MB prompt made every view of its set return 51 MB)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from experiments import services
from experiments.models import Prompt, PromptSet

from tests.fixtures.services import ROOT, wait_for, worker_database_url

from .dashboard_fixtures import make_run

pytestmark = pytest.mark.django_db

PAGE_BOMB = ROOT / "tests" / "fixtures" / "data" / "page_bomb.parquet"
# Peak resident growth of the process that took the uploads (the web worker's part): the bombs'
# decoding happens elsewhere, so this is the cost of the request, the spool copy and the thread.
WEB_BOUND_MIB = 64
# Peak resident size of one parsing child on the dictionary bomb: Python, pyarrow, the
# dictionary's one 2 MiB entry.
CHILD_BOUND_MIB = 160


def dictionary_bomb(rows: int = 300, size: int = 2 * 2**20) -> bytes:
    """The issue's file: a plain string column repeating one 2 MiB prompt, which Parquet stores
    as a dictionary of one entry (757 bytes with zstd and the Arrow schema, 512 without)."""
    out = io.BytesIO()
    # Written from a dictionary without the Arrow schema: the bytes a plain string column makes,
    # without expanding 600 MB here to write them.
    prompt = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                            pa.array(["1" * size]))
    pq.write_table(pa.table({"prompt": prompt, "answer": ["2"] * rows}), out,
                   compression="zstd", compression_level=22, store_schema=False)
    return out.getvalue()


def upload(client: Client, content: bytes, filename: str = "p.jsonl", name: str = "up") -> Any:
    return client.post(reverse("dashboard:prompt_sets"), {
        "upload-name": name, "upload-file": SimpleUploadedFile(filename, content)})


def file_errors(resp: Any) -> str:
    assert resp.status_code == 200, resp.status_code
    return " ".join(resp.context["upload"].errors.get("file", []))


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


# --- bombs, in a fresh interpreter ----------------------------------------------------------------

MEASURE = """
import json, logging, os, resource, sys, threading
import django
django.setup()
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from experiments import services

def peak_mib(who):
    return resource.getrusage(who).ru_maxrss / 1024

# Each parser's own peak, as the importer logs it (the child's VmHWM: getrusage's figure for
# children counts this process's memory at the fork).
parsers = []
class Peaks(logging.Handler):
    def emit(self, record):
        parsers.append(record.args[2])
logging.getLogger("experiments.services.prompt_import").addHandler(Peaks())

def uploads(path, count, tag):
    reasons = []
    def one(i):
        with open(path, "rb") as f:
            try:
                services.create_prompt_set_from_upload(AnonymousUser(), f"{tag}-{i}", f,
                                                       os.path.basename(path))
                reasons.append("accepted")
            except services.LaunchError as exc:
                reasons.append(exc.field + ": " + exc.reason)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reasons

before = peak_mib(resource.RUSAGE_SELF)
out = {"one": uploads(sys.argv[1], 1, "one"), "four": uploads(sys.argv[1], 4, "four")}
out["web_growth_mib"] = peak_mib(resource.RUSAGE_SELF) - before
out["child_peaks_mib"] = list(parsers)
# Only the memory cap left between the page bomb and the machine.
settings.PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES = 2**40
settings.PROMPT_UPLOAD_MAX_RECORD_BYTES = 2**40
settings.PROMPT_MAX_CHARS = 2**40
settings.PROMPT_IMPORT_MAX_MEMORY_BYTES = 512 * 2**20
out["page"] = uploads(sys.argv[2], 1, "page")
out["web_growth_after_page_mib"] = peak_mib(resource.RUSAGE_SELF) - before
out["page_child_peak_mib"] = parsers[-1]
print(json.dumps(out))
"""


def test_bombs_are_refused_in_bounded_memory(transactional_db: None, tmp_path: Path) -> None:
    """The issue's 757-byte bomb, once and four at once, and a 9 KB file holding one 256 MiB
    value with every file-level limit lifted, uploaded through the service from a fresh
    interpreter (the web worker's place): each refused naming the limit it met, the uploading
    process's peak memory within WEB_BOUND_MIB, each parser's within its bound, nothing
    stored."""
    bomb = tmp_path / "bomb.parquet"
    bomb.write_bytes(dictionary_bomb())
    assert len(bomb.read_bytes()) < 1024 and PAGE_BOMB.stat().st_size < 16 * 2**10
    env = {**os.environ, "DATABASE_URL": worker_database_url(),
           "PROMPT_UPLOAD_WAIT_SECONDS": "120", "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}"}
    out = subprocess.run([sys.executable, "-c", MEASURE, str(bomb), str(PAGE_BOMB)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    record = ("file: bomb.parquet, row 1: decodes to 2.0 MiB, more than 1.0 MiB, the limit of "
              "one record")
    assert got["one"] == [record] and got["four"] == [record] * 4
    assert got["web_growth_mib"] < WEB_BOUND_MIB, got
    assert len(got["child_peaks_mib"]) == 5 and max(got["child_peaks_mib"]) < CHILD_BOUND_MIB, got
    # The page bomb, with nothing but the parser's memory cap to stop it.
    assert got["page"] == ["file: page_bomb.parquet: parsing it needed more than 512 MiB of "
                           "memory, the limit (PROMPT_IMPORT_MAX_MEMORY_BYTES)"]
    assert got["web_growth_after_page_mib"] < WEB_BOUND_MIB, got
    assert got["page_child_peak_mib"] < 512, got
    assert not PromptSet.objects.exists() and not Prompt.objects.exists()


# --- huge records -------------------------------------------------------------------------------

def test_a_huge_prompt_or_record_is_refused_naming_the_limit(owner_client: Client,
                                                             settings: Any) -> None:
    too_long = "7" * (settings.PROMPT_MAX_CHARS + 1)
    errors = file_errors(upload(owner_client, jsonl([{"prompt": "1+1=", "answer": "2"},
                                                     {"prompt": too_long, "answer": "1"}])))
    assert (f"p.jsonl, line 2: the prompt is {len(too_long):,} characters; the limit is "
            f"{settings.PROMPT_MAX_CHARS:,} characters per prompt") in errors
    # A record (a JSONL line) is read no further than its limit: the 49 MB one-line
    # file is refused after a mebibyte of it.
    settings.PROMPT_UPLOAD_MAX_RECORD_BYTES = 64 * 2**10
    errors = file_errors(upload(owner_client, jsonl([
        {"prompt": "1+1=", "answer": "2", "notes": "x" * (64 * 2**10)}])))
    assert "p.jsonl, line 1: longer than 64.0 KiB, the limit of one record" in errors
    assert not PromptSet.objects.exists() and not Prompt.objects.exists()
    # Every way into a set holds the prompt limit, not only uploads.
    with pytest.raises(services.LaunchError, match=r"prompt 1 is 65,537 characters; the limit "
                                                   r"is 65,536 \(PROMPT_MAX_CHARS\)"):
        services.import_prompt_set(owner=None, name="cli", prompts=[
            Prompt(text=too_long, answer="1", metadata={})])


# --- off the request thread ---------------------------------------------------------------------

def test_a_large_upload_imports_in_the_background_with_its_progress_on_the_page(
        transactional_db: None, owner: Any, settings: Any) -> None:
    """With the request's wait over (0 s here; 2 s by default), the upload answers at once:
    the page goes to the set, which shows its progress while the thread imports and reloads
    when it is done; the API answers 202 and the set's status says when it is ready. A file
    refused after the answer leaves the set failed with the reason on its page, nothing stored,
    and its name free for the next upload."""
    from api.services import create_token

    settings.PROMPT_UPLOAD_WAIT_SECONDS = 0
    client = Client()
    client.force_login(owner)
    rows = [{"prompt": f"{i}+{i % 97}=", "answer": str(i + i % 97)} for i in range(8_000)]
    resp = upload(client, jsonl(rows), name="big")
    ps = PromptSet.objects.get(name="big")
    assert resp.status_code == 302 and resp["Location"] == reverse(
        "dashboard:prompt_set_detail", args=[ps.pk])
    # Answered while the child parses (its start alone outlasts the wait of 0 s).
    assert ps.status == PromptSet.Status.IMPORTING
    page = client.get(resp["Location"]).content.decode()
    status_url = reverse("dashboard:prompt_set_status", args=[ps.pk])
    assert ("Importing" in page and f'hx-get="{status_url}"' in page) or "19+19=" in page
    wait_for(lambda: PromptSet.objects.get(pk=ps.pk).status != PromptSet.Status.IMPORTING, 120,
             what="the import to end")
    ps.refresh_from_db()
    assert (ps.status, ps.size, ps.import_rows, ps.import_fraction) == ("ready", 8_000, 8_000,
                                                                        1.0)
    assert Prompt.objects.get(prompt_set=ps, index=len(rows) - 1).text == rows[-1]["prompt"]
    done = client.get(reverse("dashboard:prompt_set_status", args=[ps.pk]))
    assert done["HX-Refresh"] == "true"  # the polling page reloads
    assert "19+19=" in client.get(reverse("dashboard:prompt_set_detail", args=[ps.pk])
                                  ).content.decode()

    # A bad line far into the file: refused after the answer.
    bad = jsonl(rows[:6_000]) + b'{"prompt": "1+1="}\n'
    resp = upload(client, bad, name="bad")
    failed = PromptSet.objects.get(name="bad")
    wait_for(lambda: PromptSet.objects.get(pk=failed.pk).status == PromptSet.Status.FAILED, 120,
             what="the import to fail")
    page = client.get(reverse("dashboard:prompt_set_detail", args=[failed.pk])).content.decode()
    assert ("Rejected, nothing imported: p.jsonl, line 6001: missing field &#x27;answer&#x27;"
            in page)
    assert not Prompt.objects.filter(prompt_set=failed).exists()
    failed.refresh_from_db()
    with pytest.raises(services.LaunchError, match="failed to import: p.jsonl, line 6001"):
        services.launch_run(owner, "r", {"backend": "simulated", "batch_size": 4}, failed)
    # The failed set gives its name up.
    assert upload(client, jsonl(rows[:10]), name="bad").status_code == 302
    wait_for(lambda: PromptSet.objects.get(name="bad").size == 10, 120, what="the new 'bad'")

    # The API: 202 while importing, the status to poll.
    token = create_token(owner, "tests")[1]
    answer = Client().post("/api/v1/prompt-sets", {
        "name": "api-big", "file": SimpleUploadedFile("q.jsonl", jsonl(rows))},
        HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["status"] == "importing" and body["size"] == 0
    wait_for(lambda: Client().get(f"/api/v1/prompt-sets/{body['id']}",
                                  HTTP_AUTHORIZATION=f"Bearer {token}").json()["status"]
             == "ready", 120, what="the API's import")


def test_a_set_not_ready_is_refused_by_launches_and_a_stalled_one_reads_failed(
        owner: Any, owner_client: Client, settings: Any) -> None:
    importing = PromptSet.objects.create(name="half", source="upload", status="importing",
                                         owner=owner, import_rows=1234, import_fraction=0.25,
                                         import_updated_at=timezone.now())
    page = owner_client.get(reverse("dashboard:prompt_set_detail", args=[importing.pk]))
    assert "1,234 prompts read so far, 25% of the file" in page.content.decode()
    listing = owner_client.get(reverse("dashboard:prompt_sets")).content.decode()
    assert "importing: 1,234 prompts so far" in listing
    with pytest.raises(services.LaunchError, match="half is still importing"):
        services.launch_run(owner, "r", {"backend": "simulated", "batch_size": 4}, importing)
    launch = owner_client.get(reverse("dashboard:run_launch")).content.decode()
    assert ">half<" not in launch  # not offered
    with pytest.raises(services.LaunchError, match="still importing"):
        services.delete_prompt_set(importing, owner)
    # Its importer gave no sign of life for PROMPT_IMPORT_STALE_SECONDS: it failed.
    PromptSet.objects.filter(pk=importing.pk).update(
        import_updated_at=timezone.now() - timezone.timedelta(
            seconds=settings.PROMPT_IMPORT_STALE_SECONDS + 1))
    page = owner_client.get(reverse("dashboard:prompt_set_detail", args=[importing.pk]))
    assert "the import stopped (the web server restarted" in page.content.decode()
    assert upload(owner_client, jsonl([{"prompt": "1+1=", "answer": "2"}]),
                  name="half").status_code == 302
    assert PromptSet.objects.get(name="half").status == "ready"


# --- previews -----------------------------------------------------------------------------------

def test_prompts_are_listed_as_previews_and_shown_whole_on_their_page(
        owner: Any, owner_client: Client, settings: Any) -> None:
    from experiments.selectors import PROMPT_PREVIEW_CHARS

    long_text = "".join(f"{i % 10}" for i in range(60_000)) + "=?"
    ps = services.import_prompt_set(owner=owner, name="long", prompts=[
        Prompt(text=long_text, answer="42", metadata={"source": "x"}),
        *(Prompt(text=f"{i}+1=", answer=str(i + 1), metadata={}) for i in range(1, 8))])
    marker = f"… ({len(long_text):,} characters)"
    page = owner_client.get(reverse("dashboard:prompt_set_detail", args=[ps.pk]))
    text = page.content.decode()
    assert marker in text and long_text[:PROMPT_PREVIEW_CHARS] in text
    assert len(page.content) < 32 * 2**10  # not the prompt's 60 KB
    whole = owner_client.get(reverse("dashboard:prompt_detail", args=[ps.pk, 0]))
    assert long_text in whole.content.decode() and "&quot;source&quot;: &quot;x&quot;" in \
        whole.content.decode()
    assert owner_client.get(reverse("dashboard:prompt_detail", args=[ps.pk, 99])
                            ).status_code == 404
    # A prompt's history in a run.
    run = make_run(owner, ps, name="on-long")
    prompt = Prompt.objects.get(prompt_set=ps, index=0)
    history = owner_client.get(reverse("dashboard:prompt_history", args=[run.pk, prompt.pk]))
    assert marker in history.content.decode() and len(history.content) < 64 * 2**10
    assert reverse("dashboard:prompt_detail", args=[ps.pk, 0]) in history.content.decode()
    # The API: previews in the set's detail, the whole prompt at its own address.
    from api.services import create_token

    auth = {"HTTP_AUTHORIZATION": f"Bearer {create_token(owner, 'tests')[1]}"}
    detail = owner_client.get(f"/api/v1/prompt-sets/{ps.pk}", **auth).json()
    first = detail["preview"][0]
    assert first["text"] == long_text[:PROMPT_PREVIEW_CHARS] + marker
    assert (first["text_chars"], first["truncated"]) == (len(long_text), True)
    assert detail["preview"][1] == {"id": detail["preview"][1]["id"], "index": 1,
                                    "text": "1+1=", "text_chars": 4, "answer": "2",
                                    "answer_chars": 1, "truncated": False}
    full = owner_client.get(f"/api/v1/prompt-sets/{ps.pk}/prompts/0", **auth).json()
    assert full["text"] == long_text and full["metadata"] == {"source": "x"}
    assert owner_client.get(f"/api/v1/prompt-sets/{ps.pk}/prompts/8", **auth
                            ).status_code == 404
