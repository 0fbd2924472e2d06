"""Production settings: `check --deploy` is clean with docker-compose's environment, HTTPS behind
a proxy (POSTs accepted from the trusted origin), no published SECRET_KEY without DEBUG, failed
requests' tracebacks in the log, sign-in throttling, admin deletes through the services, and the
admin password file's mode."""

from __future__ import annotations

import io
import logging
import os
import runpy
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings
from django.urls import path
from experiments.models import Checkpoint, Prompt, PromptSet, Run, Sample, Step

from tests.fixtures.services import ROOT

from .dashboard_fixtures import make_prompt_set, make_run, record_run

SETTINGS_FILE = ROOT / "platform" / "webapp" / "settings.py"


def _boom(request: Any) -> Any:
    raise RuntimeError("boom: a bug in a view")


# ROOT_URLCONF of test_failed_request_traceback_goes_to_the_log.
urlpatterns = [path("boom/", _boom)]


def _compose_env() -> dict[str, str]:
    import yaml

    env = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"][
        "environment"]
    # This process's environment minus what only tests set (the browser tests allow async
    # ORM calls, which --deploy rightly refuses).
    own = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    return {**own,
            "DJANGO_SETTINGS_MODULE": env["DJANGO_SETTINGS_MODULE"],
            "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "rada.example.org",
            "CSRF_TRUSTED_ORIGINS": "https://rada.example.org"}


def test_check_deploy_is_clean_under_the_compose_settings() -> None:
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level",
                          "WARNING"], cwd=ROOT, env=_compose_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch) -> Any:
    """webapp.settings_production's own values, read with the compose environment (its base,
    webapp.settings, is the module already imported)."""
    for key, value in _compose_env().items():
        monkeypatch.setenv(key, value)
    module = runpy.run_path(str(ROOT / "platform" / "webapp" / "settings_production.py"))
    names = ("SECURE_PROXY_SSL_HEADER", "SECURE_SSL_REDIRECT", "SECURE_REDIRECT_EXEMPT",
             "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS",
             "CSRF_TRUSTED_ORIGINS", "DEBUG")
    with override_settings(ALLOWED_HOSTS=["rada.example.org"],
                           **{name: module[name] for name in names}):
        yield module


@pytest.mark.django_db
def test_behind_a_tls_proxy_sign_in_posts_are_accepted(production: Any) -> None:
    User.objects.create_user("ann", password="pw-ann-12345")
    proxied = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_HOST": "rada.example.org"}
    c = Client(enforce_csrf_checks=True)
    page = c.get("/login/", **proxied)
    assert page.status_code == 200
    assert page["Strict-Transport-Security"].startswith("max-age=31536000")
    assert page.cookies["csrftoken"]["secure"]
    form = {"username": "ann", "password": "pw-ann-12345",
            "csrfmiddlewaretoken": page.cookies["csrftoken"].value}
    refused = c.post("/login/", form, HTTP_ORIGIN="https://elsewhere.example.org", **proxied)
    assert refused.status_code == 403
    signed_in = c.post("/login/", form, HTTP_ORIGIN="https://rada.example.org", **proxied)
    assert signed_in.status_code == 302 and signed_in.cookies["sessionid"]["secure"]
    # Plain HTTP goes to HTTPS, except the health check.
    plain = Client().get("/login/", HTTP_HOST="rada.example.org")
    assert plain.status_code == 301 and plain["Location"].startswith("https://rada.example.org")
    assert Client().get("/healthz", HTTP_HOST="rada.example.org").status_code == 200


@pytest.mark.parametrize("key", ["", "change-me-in-production",
                                 "dev-only-insecure-key-change-me", "django-insecure-abc"])
def test_published_secret_keys_are_refused_without_debug(monkeypatch: pytest.MonkeyPatch,
                                                         key: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("SECRET_KEY", key)
    monkeypatch.delenv("DEBUG", raising=False)
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY is unset or a published default"):
        runpy.run_path(str(SETTINGS_FILE))
    monkeypatch.setenv("DEBUG", "1")  # a development server may run without one
    assert runpy.run_path(str(SETTINGS_FILE))["SECRET_KEY"]
    monkeypatch.setenv("DEBUG", "0")
    monkeypatch.setenv("SECRET_KEY", secrets.token_urlsafe(50))
    assert runpy.run_path(str(SETTINGS_FILE))["SECRET_KEY"] == os.environ["SECRET_KEY"]


def test_the_web_process_does_not_start_without_a_secret_key() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    out = subprocess.run([sys.executable, "-c", "from webapp.wsgi import application"],
                         cwd=ROOT, env={**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "SECRET_KEY is unset or a published default" in out.stderr


@pytest.mark.urls(__name__)
def test_failed_request_traceback_goes_to_the_log(db: None) -> None:
    """LOGGING sends a failed request's traceback to stderr (gunicorn's log, compose logs)."""
    (handler,) = [h for h in logging.getLogger().handlers if h.get_name() == "stderr"]
    log = io.StringIO()
    previous = handler.setStream(log)
    try:
        response = Client(raise_request_exception=False).get("/boom/")
    finally:
        handler.setStream(previous)
    assert response.status_code == 500
    text = log.getvalue()
    assert "ERROR django.request: Internal Server Error: /boom/" in text
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: boom: a bug in a view" in text


@pytest.mark.django_db
def test_sign_in_is_throttled_after_repeated_failures(settings: Any) -> None:
    User.objects.create_user("bea", password="pw-bea-12345")
    User.objects.create_user("cid", password="pw-cid-12345")
    settings.AXES_FAILURE_LIMIT = 2  # 5 by default; each attempt hashes a password (~1 s)
    c = Client()
    wrong = c.post("/login/", {"username": "bea", "password": "guess"})
    assert wrong.status_code == 200 and b"Please enter a correct" in wrong.content
    locked = c.post("/login/", {"username": "bea", "password": "guess again"})
    assert locked.status_code == 429
    assert b"Sign-in locked" in locked.content and b"0:15:00" in locked.content
    # Locked: even the right password does not sign in until the cool-off ends.
    assert c.post("/login/", {"username": "bea", "password": "pw-bea-12345"}).status_code == 429
    assert "_auth_user_id" not in c.session
    # The lock is for that user name from that address; others still sign in.
    other = c.post("/login/", {"username": "cid", "password": "pw-cid-12345"})
    assert other.status_code == 302



@pytest.mark.django_db
def test_behind_the_proxy_the_sign_in_lock_counts_the_clients_address(settings: Any) -> None:
    # nginx overwrites X-Forwarded-For with the address it saw; every request reaches gunicorn
    # from nginx's own address. The lock must hold per client, as the API's throttles do.
    User.objects.create_user("bea", password="pw-bea-12345")
    settings.AXES_FAILURE_LIMIT = 2
    settings.NINJA_NUM_PROXIES = 1
    nginx = {"REMOTE_ADDR": "10.0.0.2"}
    mallory = Client(HTTP_X_FORWARDED_FOR="203.0.113.7", **nginx)
    for guess in ("guess", "guess again"):
        mallory.post("/login/", {"username": "bea", "password": guess})
    assert mallory.post("/login/", {"username": "bea", "password": "x"}).status_code == 429
    # bea from her own address is not locked out by mallory's guesses through the same proxy.
    bea = Client(HTTP_X_FORWARDED_FOR="198.51.100.4", **nginx)
    assert bea.post("/login/", {"username": "bea", "password": "pw-bea-12345"}).status_code == 302
    # Without a trusted proxy the header is the client's own words and is ignored: a forged
    # X-Forwarded-For does not escape the lock on the connection's address.
    settings.NINJA_NUM_PROXIES = 0
    direct = {"REMOTE_ADDR": "203.0.113.9"}
    for guess in ("guess", "guess again"):
        Client(**direct).post("/login/", {"username": "bea", "password": guess})
    forged = Client(HTTP_X_FORWARDED_FOR="192.0.2.1", **direct)
    right = {"username": "bea", "password": "pw-bea-12345"}
    assert forged.post("/login/", right).status_code == 429


@pytest.fixture
def staff_client(django_user_model: Any) -> Client:
    admin = django_user_model.objects.create_superuser("root", "", "pw-root-12345")
    c = Client()
    c.force_login(admin)
    return c


@pytest.mark.django_db
def test_admin_deletes_a_run_through_the_service(staff_client: Client, settings: Any,
                                                 tmp_path: Path,
                                                 django_capture_on_commit_callbacks: Any) -> None:
    settings.CHECKPOINT_ROOT = tmp_path
    owner = User.objects.create_user("own", password="pw-own-12345")
    ps = make_prompt_set()
    runs = [record_run(make_run(owner, ps, name="r0", total_steps=2)),
            make_run(owner, ps, name="r1"), make_run(owner, ps, name="r2")]
    for run in runs:
        (tmp_path / f"run-{run.pk}" / "step-2").mkdir(parents=True)
        Checkpoint.objects.create(run=run, step=2, path=str(tmp_path / f"run-{run.pk}"))
    assert Sample.objects.filter(run=runs[0]).exists()
    url = f"/admin/experiments/run/{runs[0].pk}/delete/"
    confirm = staff_client.get(url)
    # The confirmation lists the run, not the cascade of its records.
    assert confirm.status_code == 200 and b"r0" in confirm.content
    assert b"Sample" not in confirm.content and b"Step:" not in confirm.content
    with django_capture_on_commit_callbacks(execute=True):
        assert staff_client.post(url, {"post": "yes"}).status_code == 302
    with django_capture_on_commit_callbacks(execute=True):
        bulk = staff_client.post("/admin/experiments/run/", {
            "action": "delete_selected", "post": "yes",
            "_selected_action": [runs[1].pk, runs[2].pk]})
    assert bulk.status_code == 302
    assert not Run.objects.exists()
    for model in (Sample, Step, Checkpoint):
        assert not model.objects.exists(), model
    assert not any((tmp_path / f"run-{r.pk}").exists() for r in runs)


@pytest.mark.django_db
def test_admin_deletes_a_prompt_set_only_when_no_run_uses_it(staff_client: Client) -> None:
    owner = User.objects.create_user("own", password="pw-own-12345")
    ps = make_prompt_set(size=5)
    run = make_run(owner, ps, name="user-of-the-set")
    url = f"/admin/experiments/promptset/{ps.pk}/delete/"
    page = staff_client.get(url)
    assert b"user-of-the-set" in page.content  # protected: listed, no delete button
    assert staff_client.post(url, {"post": "yes"}).status_code == 200
    assert PromptSet.objects.filter(pk=ps.pk).exists()
    Run.objects.filter(pk=run.pk).delete()
    assert staff_client.post(url, {"post": "yes"}).status_code == 302
    assert not PromptSet.objects.exists() and not Prompt.objects.exists()
    # Single prompts are not deleted on their own: a set is used whole.
    other = make_prompt_set("other", size=2)
    prompt = other.prompts.first()
    assert staff_client.get(f"/admin/experiments/prompt/{prompt.pk}/delete/").status_code == 403


@pytest.mark.django_db
def test_admin_password_file_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.management.commands.demo import Command

    secret = tmp_path / "admin-password"
    secret.write_text("stale\n")
    secret.chmod(0o644)  # a file left readable by someone else
    monkeypatch.setenv("RADA_ADMIN_PASSWORD_FILE", str(secret))
    admin, password = Command().ensure_admin()
    assert admin.is_superuser and secret.read_text() == password + "\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
