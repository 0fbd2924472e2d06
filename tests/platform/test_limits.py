"""Bounded caches, bodies and uploads: chart cache keys do not grow with the query, the cache is
a Redis of its own that evicts instead of failing, request bodies keep Django's limit, and
prompt-set uploads are held to their size, row and uncompressed-size limits while they stream,
rejected whole with the limit and the value."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from dashboard.charts import FULL_RESOLUTION_CHARTS, POINT_LEVELS, RUN_CHARTS
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from experiments.models import Prompt, PromptSet, Run

from .dashboard_fixtures import make_prompt_set, make_run, record_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> Client:
    c = Client()
    c.force_login(User.objects.create_user("reader", password="pw-reader-123"))
    return c


def _cache_redis() -> redis.Redis:
    location = django_settings.CACHES["default"].get("LOCATION")
    if not str(location).startswith("redis://"):
        pytest.skip("CACHE_URL is not a Redis (make test starts one)")
    return redis.Redis.from_url(location)


# --- chart cache -------------------------------------------------------------------------------

def test_chart_cache_keys_stay_bounded_whatever_points_is_asked(client: Client) -> None:
    owner = User.objects.create_user("owner", password="pw-owner-123")
    run = record_run(make_run(owner, make_prompt_set(), name="done", total_steps=3))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    r = _cache_redis()
    prefix = django_settings.CACHES["default"]["KEY_PREFIX"]

    def keys(chart: str) -> set[bytes]:
        return set(r.scan_iter(f"{prefix}:*:dash:chart.{chart}*:{run.pk}.*"))

    asked = [1, 3, 4, 5, 7, 8, 9, 100, 129, 333, 1000, 1023, 1024, 1500, 4095, 4096, 5000,
             10**9, -5, "abc"]
    for chart in ("rewards", "heatmap"):
        for points in asked:
            resp = client.get(reverse("dashboard:run_chart", args=[run.pk, chart]),
                              {"points": points})
            assert resp.status_code == 200
    assert len(keys("heatmap")) == 1  # the heatmap ignores points: one entry
    # One entry per power of two in 4..4096 that was asked for (4 by rounding down, the default
    # 1024 for values that are not numbers): 4, 8, 64, 128, 256, 512, 1024, 2048, 4096.
    assert len(keys("rewards")) == 9 <= len(POINT_LEVELS) < len(asked)
    assert set(RUN_CHARTS) >= set(FULL_RESOLUTION_CHARTS)


def test_downsampled_chart_never_exceeds_the_points_asked(client: Client) -> None:
    owner = User.objects.create_user("owner", password="pw-owner-123")
    run = record_run(make_run(owner, make_prompt_set(), name="done", total_steps=6))
    for points, at_most in ((5, 4), (4, 4), (1, 4)):
        fig = client.get(reverse("dashboard:run_chart", args=[run.pk, "rewards"]),
                         {"points": points}).json()
        assert all(len(t["x"]) <= at_most for t in fig["data"])


def test_cache_is_a_bounded_redis_apart_from_the_broker() -> None:
    """The quick start's cache: its own Redis with maxmemory and LRU eviction. Filled past its
    limit, writes still succeed (old keys go) and the broker's keys are untouched."""
    r = _cache_redis()
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    assert r.connection_pool.connection_kwargs["port"] != \
        broker.connection_pool.connection_kwargs["port"]
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
    assert int(r.config_get("maxmemory")["maxmemory"]) > 0
    assert broker.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    broker.set("rada-test:queued-run", "keep me")
    limit = r.config_get("maxmemory")["maxmemory"]
    # Shrink the limit for the test: a little above what the cache holds now.
    r.config_set("maxmemory", int(r.info("memory")["used_memory"]) + 2 * 2**20)
    try:
        evicted_before = r.info("stats")["evicted_keys"]
        blob = b"x" * 2**17
        for i in range(48):  # 6 MiB into a cache with room for 2
            cache.set(f"limits-test-{i}", blob, timeout=60)
        assert r.info("stats")["evicted_keys"] > evicted_before
        assert cache.get("limits-test-0") is None and cache.get("limits-test-47") == blob
    finally:
        r.config_set("maxmemory", limit)
        cache.delete_many([f"limits-test-{i}" for i in range(48)])
    assert broker.get("rada-test:queued-run") == b"keep me"
    broker.delete("rada-test:queued-run")


# --- request bodies and uploads -----------------------------------------------------------

def test_non_file_bodies_keep_djangos_default_limit() -> None:
    from django.conf import global_settings

    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == \
        global_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440
    big = "x" * (3 * 2**20)
    assert Client().post("/login/", {"username": big, "password": "x"}).status_code == 400


def _upload(client: Client, content: bytes, filename: str = "p.jsonl", name: str = "up") -> Any:
    return client.post(reverse("dashboard:prompt_sets"), {
        "upload-name": name, "upload-file": SimpleUploadedFile(filename, content)})


def _file_errors(resp: Any) -> str:
    assert resp.status_code == 200
    return " ".join(resp.context["upload"].errors.get("file", []))


@pytest.mark.parametrize(("size", "message"), [
    (200 * 2**10, "the file is larger than the limit of 0.1 MiB (PROMPT_UPLOAD_MAX_BYTES)"),
    (3 * 2**20, "the upload is 3.0 MiB; the limit is 0.1 MiB (PROMPT_UPLOAD_MAX_BYTES)"),
])
def test_an_upload_past_its_cap_is_refused_while_it_streams(client: Client, settings: Any,
                                                            size: int, message: str) -> None:
    settings.PROMPT_UPLOAD_MAX_BYTES = 64 * 2**10
    line = b'{"prompt": "1+1=", "answer": "2"}\n'
    resp = _upload(client, line * (size // len(line)))
    assert "Rejected, nothing imported: " + message in _file_errors(resp)
    assert not resp.wsgi_request.FILES  # nothing of it was kept
    assert not PromptSet.objects.exists()


def test_pages_that_take_no_files_drop_them(client: Client) -> None:
    resp = client.post(reverse("dashboard:run_launch"),
                       {"name": "x", "file": SimpleUploadedFile("a.bin", b"z" * 2**16)})
    assert resp.status_code == 200 and not resp.wsgi_request.FILES
    assert resp.wsgi_request.rejected_files == {"file": "this page accepts no files"}


def test_an_upload_past_the_row_cap_is_rejected_whole(client: Client, settings: Any) -> None:
    settings.PROMPT_UPLOAD_MAX_ROWS = 10
    lines = b"".join(b'{"prompt": "%d+1=", "answer": "%d"}\n' % (i, i + 1) for i in range(11))
    errors = _file_errors(_upload(client, lines))
    assert "p.jsonl, line 11: more than 10 prompts; the limit is 10" in errors
    assert not PromptSet.objects.exists() and not Prompt.objects.exists()
    assert _upload(client, lines[:lines.index(b"\n{", 300)]).status_code == 302  # 10 are fine


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf, compression="zstd")
    return buf.getvalue()


def test_a_parquet_file_that_expands_past_the_limit_is_rejected_by_its_metadata(
        client: Client, settings: Any) -> None:
    # The file is parsed in a child process (experiments/prompt_parser.py): the message says
    # the footer refused it, before any page was read.
    settings.PROMPT_UPLOAD_MAX_UNCOMPRESSED_BYTES = 2**20
    bomb = _parquet([{"prompt": "7" * 5000 + f"+{i}=", "answer": "1"} for i in range(2000)])
    assert len(bomb) < 64 * 2**10  # small on the wire, 10 MB of strings inside
    errors = _file_errors(_upload(client, bomb, "bomb.parquet"))
    assert "bomb.parquet: the file's metadata declares " in errors
    assert " MiB of data uncompressed; the limit is 1.0 MiB" in errors
    settings.PROMPT_UPLOAD_MAX_ROWS = 1000
    errors = _file_errors(_upload(client, bomb, "bomb.parquet"))
    assert "the file's metadata declares 2,000 rows; the limit is 1,000" in errors
    assert not PromptSet.objects.exists()


def test_a_parquet_upload_within_the_limits_is_imported(client: Client) -> None:
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "level": i % 3} for i in range(3000)]
    resp = _upload(client, _parquet(rows), "ok.parquet", name="parquet-set")
    assert resp.status_code == 302
    ps = PromptSet.objects.get(name="parquet-set")
    assert ps.size == 3000
    last = Prompt.objects.get(prompt_set=ps, index=2999)
    assert (last.text, last.answer, last.metadata) == ("2999+1=", "3000", {"level": 2})
    assert json.dumps(last.metadata)
