"""docker-compose.yml (the production path) cannot be started here: parse it and check its
services, volumes, health checks and the commands they run against the repository."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RAY_SERVICES = ("ray-head", "ray-gpu", "worker-ray")
# The GPU nodes of a rollout/train split, each in its profile, and the Ray resources it
# advertises (one of each per GPU).
ROLE_SERVICES = {"ray-rollout": ("rada_rollout",), "ray-train": ("rada_train",),
                 "ray-rollout-train": ("rada_rollout", "rada_train")}
APP_SERVICES = ("web", "worker-cpu", "worker-gpu", *RAY_SERVICES)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def command(service: dict[str, Any]) -> str:
    cmd = service["command"]
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"db", "redis", "cache", "web", "proxy", "worker-cpu",
                             "worker-gpu", "ray-head", "ray-gpu", "worker-ray",
                             *ROLE_SERVICES}
    assert services["db"]["image"] == "postgres:16"
    assert services["redis"]["image"] == services["cache"]["image"] == "redis:7"
    for name in services:
        assert "test" in services[name]["healthcheck"], name


def test_named_volumes_for_database_and_checkpoints(compose: dict[str, Any]) -> None:
    assert {"pgdata", "checkpoints"} <= set(compose["volumes"])
    assert "pgdata:/var/lib/postgresql/data" in compose["services"]["db"]["volumes"]
    for name in APP_SERVICES:
        service = compose["services"][name]
        mounts = dict(v.split(":", 1) for v in service["volumes"])
        root = service["environment"]["CHECKPOINT_ROOT"]
        # Every worker sees the same checkpoint root: a run resumes on any of them.
        assert any(root.startswith(target) for src, target in mounts.items()
                   if src == "checkpoints"), name


def test_web_migrates_and_serves_with_gunicorn(compose: dict[str, Any]) -> None:
    web = compose["services"]["web"]
    cmd = command(web)
    assert "manage.py migrate" in cmd and "collectstatic" in cmd
    assert "gunicorn webapp.wsgi" in cmd and "--pythonpath /app,/app/platform" in cmd
    # Threaded workers: a long export keeps its worker alive past the 120 s timeout.
    assert "--worker-class gthread" in cmd
    # On the compose network only: the proxy is what the world reaches.
    assert "--bind 0.0.0.0:8000" in cmd and "ports" not in web and web["expose"] == ["8000"]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    assert web["depends_on"] == {"db": {"condition": "service_healthy"},
                                 "redis": {"condition": "service_healthy"},
                                 "cache": {"condition": "service_healthy"}}
    env = web["environment"]
    assert env["DATABASE_URL"].startswith("postgres://") and "@db:5432/" in env["DATABASE_URL"]
    assert env["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    assert (ROOT / "platform" / "webapp" / "wsgi.py").is_file()


@pytest.mark.parametrize(("name", "queue"), [("worker-cpu", "cpu"), ("worker-gpu", "gpu")])
def test_workers_run_solo_on_their_queue(compose: dict[str, Any], name: str, queue: str) -> None:
    worker = compose["services"][name]
    cmd = command(worker)
    assert cmd.startswith("celery -A workers.celery_app worker")
    assert "-P solo" in cmd and f"-Q {queue}" in cmd
    assert (ROOT / "workers" / "celery_app.py").is_file()
    assert worker["healthcheck"]["test"][-2:] == ["-m", "workers.healthcheck"]
    assert (ROOT / "workers" / "healthcheck.py").is_file()
    assert worker["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"


def test_gpu_worker_reserves_a_gpu_and_installs_the_gpu_extra(compose: dict[str, Any]) -> None:
    gpu = compose["services"]["worker-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["build"]["args"]["EXTRA_REQUIREMENTS"] == "requirements-gpu.txt"
    assert "vllm" in (ROOT / "requirements-gpu.txt").read_text()
    assert "deploy" not in compose["services"]["worker-cpu"]


def test_dockerfile_is_the_one_referenced(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in APP_SERVICES:
        assert compose["services"][name]["build"]["dockerfile"] == "Dockerfile"
    assert dockerfile.startswith("#") and "FROM python:3.11" in dockerfile
    assert "pip install -r requirements.txt" in dockerfile
    assert "ARG EXTRA_REQUIREMENTS" in dockerfile and "USER rada" in dockerfile


def test_cache_is_a_bounded_redis_apart_from_the_broker(compose: dict[str, Any]) -> None:
    """A full cache evicts its least recently used keys; the broker's Redis has no memory
    limit, so eviction can never drop a queued run."""
    cache = command(compose["services"]["cache"])
    assert "--maxmemory 256mb" in cache and "--maxmemory-policy allkeys-lru" in cache
    assert "maxmemory" not in command(compose["services"]["redis"])
    for name in APP_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["CACHE_URL"] == "redis://cache:6379/0" != env["CELERY_BROKER_URL"]


def test_production_settings_and_required_secrets(compose: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "webapp.settings_production"
        # Compose refuses to start without a SECRET_KEY (no published default).
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?")
        assert env["CSRF_TRUSTED_ORIGINS"].startswith("${CSRF_TRUSTED_ORIGINS")
    assert (ROOT / "platform" / "webapp" / "settings_production.py").is_file()


def _flags(cmd: str) -> dict[str, str]:
    return dict(f.removeprefix("--").split("=", 1) for f in shlex.split(cmd)
                if f.startswith("--") and "=" in f)


def test_ray_head_publishes_its_ports_and_schedules_nothing(compose: dict[str, Any]) -> None:
    head = compose["services"]["ray-head"]
    cmd = command(head)
    assert cmd.startswith("ray start --head") and "--block" in cmd
    flags = _flags(cmd)
    # Ranks go to the GPU nodes, never to the head.
    assert flags["num-cpus"] == flags["num-gpus"] == "0"
    published = {p.split(":")[0] for p in head["ports"]}
    for port in (flags["port"], flags["node-manager-port"], flags["object-manager-port"],
                 flags["ray-client-server-port"], "8265"):
        assert port in published, port
    assert flags["dashboard-host"] == "0.0.0.0"
    assert "health-check" in head["healthcheck"]["test"]


def test_ray_nodes_join_the_head_with_shared_memory_and_one_image(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    head_port = _flags(command(services["ray-head"]))["port"]
    for name in RAY_SERVICES:
        service = services[name]
        # Docker's /dev/shm is 64 MB; Ray's object store lives there.
        size = service["shm_size"]
        assert size.endswith("gb") and int(size[:-2]) >= 8, name
        # One Python, one Ray, one trainer on every node of the cluster.
        assert service["image"] == "reinforce-ada-platform:gpu", name
        assert service["build"]["args"]["EXTRA_REQUIREMENTS"] == "requirements-gpu.txt"
        assert service["environment"]["RAY_USAGE_STATS_ENABLED"] == "0", name
    for name in ("ray-gpu", "worker-ray"):
        cmd = command(services[name])
        assert "ray start --address=" in cmd and f":{head_port}" in cmd, name
        assert services[name]["depends_on"]["ray-head"] == {"condition": "service_healthy"}
    gpu = services["ray-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["count"] == "all" and "gpu" in gpu["capabilities"]
    import re

    assert re.search(r"ray==\d", (ROOT / "requirements.txt").read_text())


def test_ray_worker_drives_the_ray_queue_without_a_gpu(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker-ray"]
    cmd = command(worker)
    assert "--num-cpus=0 --num-gpus=0" in cmd  # no rank is placed on the driver's node
    assert "exec celery -A workers.celery_app worker -P solo -Q ray" in cmd
    assert "deploy" not in worker
    head = _flags(command(compose["services"]["ray-head"]))["port"]
    assert worker["environment"]["RAY_ADDRESS"] == f"ray-head:{head}"


def test_nginx_is_the_only_way_in_and_serves_the_static_files(compose: dict[str, Any],
                                                               settings: Any) -> None:
    """nginx (official image) publishes the port, forwards to gunicorn, renders the repository's
    template with values for every variable it uses, and serves collectstatic's output from the
    volume the web service writes it to. tests/platform/test_proxy.py runs the same template in
    front of a real gunicorn."""
    import re

    from tests.fixtures.proxy import TEMPLATE, render

    services = compose["services"]
    proxy = services["proxy"]
    assert re.fullmatch(r"nginx:1\.\d+", proxy["image"])
    assert proxy["ports"] == ["8000:80"]
    assert [name for name, s in services.items()
            if any(str(p).split(":")[0] == "8000" for p in s.get("ports", []))] == ["proxy"]
    env = proxy["environment"]
    assert env["RADA_LISTEN"] == "80"
    assert env["RADA_UPSTREAM"] == "web:8000"
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in proxy["volumes"])
    template = mounts[f"./{TEMPLATE.relative_to(ROOT)}"]
    assert template.startswith("/etc/nginx/templates/") and template.endswith(".conf.template")
    render({k: str(v) for k, v in env.items()})  # every ${VAR} of the template has a value
    # The static volume: written by collectstatic at STATIC_ROOT in the web container, read
    # by nginx at RADA_STATIC_ROOT.
    web_mounts = dict(v.split(":", 1) for v in services["web"]["volumes"])
    assert web_mounts["static"] == "/app/" + str(
        Path(settings.STATIC_ROOT).relative_to(settings.BASE_DIR))
    assert mounts["static"] == env["RADA_STATIC_ROOT"]
    assert "static" in compose["volumes"]
    assert "mkdir -p /data/checkpoints /data/models /app/var/staticfiles" in (
        ROOT / "Dockerfile").read_text()  # the volume starts owned by the app's user
    # The largest body the platform accepts, a prompt file plus the form's fields, fits.
    accepted = settings.PROMPT_UPLOAD_MAX_BYTES + settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert accepted <= int(env["RADA_MAX_BODY_MB"]) * 2**20 < accepted + 2**20
    assert proxy["depends_on"] == {"web": {"condition": "service_healthy"}}
    # The throttles read the client's address from the X-Forwarded-For nginx writes.
    assert services["web"]["environment"]["NUM_PROXIES"] == "1"
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in TEMPLATE.read_text()
    assert "/healthz" in " ".join(proxy["healthcheck"]["test"])


def test_health_checks_name_a_host_production_allows(compose: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """ALLOWED_HOSTS holds the public name; the checks from inside the containers send
    Host: localhost, which webapp.settings_production adds."""
    import runpy

    import webapp.settings

    for name in ("web", "proxy"):
        check = " ".join(compose["services"][name]["healthcheck"]["test"])
        assert "'Host': 'localhost'" in check or "Host: localhost" in check, name
    # settings_production star-imports the webapp.settings this process imported.
    monkeypatch.setattr(webapp.settings, "ALLOWED_HOSTS", ["rada.example.org"])
    module = runpy.run_path(str(ROOT / "platform" / "webapp" / "settings_production.py"))
    assert module["ALLOWED_HOSTS"] == ["rada.example.org", "localhost"]


def test_a_gpu_machine_serves_rollout_ranks_train_ranks_or_both(
        compose: dict[str, Any]) -> None:
    """The split's placement contract: a node advertises `rada_rollout` and/or `rada_train`,
    one per GPU it has, and Ray places a rollout rank's bundle ({"rada_rollout": 1}) or a train
    rank's ({"rada_train": 1}) only there. Each such node is opt-in (a profile), the same image
    and machine as ray-gpu, and joins the head."""
    import json

    services = compose["services"]
    assert "profiles" not in services["ray-gpu"]  # the default cluster is unchanged
    head_port = _flags(command(services["ray-head"]))["port"]
    for name, roles in ROLE_SERVICES.items():
        service = services[name]
        assert service["profiles"] == [name.removeprefix("ray-")], name
        assert service["image"] == services["ray-gpu"]["image"]
        assert service["shm_size"] == services["ray-gpu"]["shm_size"]
        assert service["deploy"] == services["ray-gpu"]["deploy"], name
        assert service["depends_on"]["ray-head"] == {"condition": "service_healthy"}
        assert "health-check" in service["healthcheck"]["test"][1]
        # Compose turns $$ into $; the shell then reads the GPU count into n.
        assert service["command"][:2] == ["sh", "-c"], name
        cmd = service["command"][2].replace("$$", "$")
        args = shlex.split("exec " + cmd.split("; exec ", 1)[1])
        assert args[:3] == ["exec", "ray", "start"] and "--block" in args, name
        flags = _flags(shlex.join(args))
        assert flags["address"] == "${RAY_HEAD:-ray-head}:" + head_port
        advertised = json.loads(flags["resources"].replace("$n", "4"))
        assert advertised == dict.fromkeys(roles, 4), name
        assert cmd.startswith("n=${RADA_NODE_GPUS:-$(python -c"), name
        assert "torch.cuda.device_count()" in cmd
        env = service["environment"]
        assert env["RAY_HEAD"] == "${RAY_HEAD:-ray-head}" and "RADA_NODE_GPUS" in env
        assert env["RAY_USAGE_STATS_ENABLED"] == "0"
