"""Issue 32's attacks, again, against the fixes (items 3, 4, 5, 7, 8): what was sent, what came
back, what was stored. In-process through Django's test client (the real views, API, services,
PostgreSQL and the Redis cache the throttles count in), on an instance of its own, flushed
first, with the deployment's default settings; no worker runs (runs stay queued).

    python scripts/services.py exec --instance abuse -- python benchmarks/abuse_drills.py

Prints one Markdown table row per drill (docs/reliability.md, "Abuse drills (issue 32)").
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "platform")]

ROWS: list[str] = []
SIM = {"backend": "simulated", "algorithm": "ada-balance", "batch_size": 4, "group_size": 4,
       "samples_per_round": 4, "max_rounds": 2, "total_steps": 2, "eval_every": 0}


def row(drill: str, sent: str, back: str, stored: str) -> None:
    ROWS.append(f"| {drill} | {sent} | {back} | {stored} |")
    print(ROWS[-1], flush=True)


def counts(statuses: list[int]) -> str:
    return ", ".join(f"{n} x {s}" for s, n in sorted(Counter(statuses).items()))


def main() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)
    call_command("migrate", verbosity=0)
    from api.services import create_token
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import connection
    from django.test import Client
    from experiments import services
    from experiments.models import PromptSet, Run

    from trainer.model import builtin_model_dir
    from trainer.tasks import arithmetic_prompts

    cache.clear()
    admin = User.objects.create_user("admin", password="x", is_staff=True)
    mallory = User.objects.create_user("mallory", password="x")
    alice = User.objects.create_user("alice", password="x")
    builtin = services.import_prompt_set(owner=admin, name="arithmetic (built-in)",
                                         prompts=arithmetic_prompts(64, 1, 2, seed=0),
                                         source=PromptSet.Source.BUILTIN, platform=True)

    def api(user: Any, addr: str = "10.0.0.1") -> Any:
        token = create_token(user, "drill")[1]
        client = Client(REMOTE_ADDR=addr)
        headers = {"Authorization": f"Bearer {token}"}

        def post(path: str, body: Any) -> Any:
            return client.post("/api/v1" + path, json.dumps(body),
                               content_type="application/json", headers=headers)
        return client, headers, post

    # --- item 3: one user floods the queue ------------------------------------------------
    _, _, post = api(mallory, "10.0.0.2")
    launch = {"name": "flood", "prompt_set": builtin.pk, "config": SIM}
    t0 = time.monotonic()
    flood = [post("/runs", launch).status_code for _ in range(60)]
    seconds = time.monotonic() - t0
    sweep = post("/sweeps", launch | {"grid": {"seed": list(range(100))}})
    row("3. 60 launches in a row by one user, then a 100-run sweep (defaults: LAUNCH_RATE "
        "30/min, RUN_MAX_ACTIVE_PER_USER 64, SWEEP_MAX_RUNS 64)",
        f"61 POSTs in {seconds:.1f} s",
        f"runs: {counts(flood)} (Retry-After {post('/runs', launch)['Retry-After']} s); "
        f"sweep: {sweep.status_code} ({sweep.json()['detail'][:90]}...)",
        f"{Run.objects.filter(owner=mallory).count()} queued runs, 0 sweeps")
    from dashboard.selectors import fair_queue

    _, _, alice_post = api(alice, "10.0.0.3")
    theirs = alice_post("/runs", launch | {"name": "alice's"}).json()["id"]
    place = fair_queue("cpu").index(theirs) + 1
    row("3. a second user launches after the flood", "1 POST /runs",
        "201", f"place {place} of {Run.objects.filter(status='queued').count()} in the "
        "workers' fair order (first-in first-out: last)")
    Run.objects.filter(owner=mallory).update(status=Run.Status.CANCELLED)
    import django.conf

    django.conf.settings.LAUNCH_RATE = "100000/min"
    _, _, post = api(mallory, "10.0.0.2")
    held = [post("/runs", launch).status_code for _ in range(70)]
    row("3. one user past RUN_MAX_ACTIVE_PER_USER (launch throttle lifted)", "70 POST /runs",
        counts(held), f"{Run.objects.filter(owner=mallory, status='queued').count()} queued")

    # wrong tokens
    client = Client(REMOTE_ADDR="10.0.0.9")
    t0 = time.monotonic()
    wrong = [client.get("/api/v1/me", headers={"Authorization": f"Bearer rada_guess{i}"})
             for i in range(158)]
    seconds = time.monotonic() - t0
    right_client, right_headers, _ = api(alice, "10.0.0.9")
    right = right_client.get("/api/v1/me", headers=right_headers)
    row("3. 158 wrong API tokens from one address (API_AUTH_FAILURE_RATE 20/min)",
        f"158 GET /me in {seconds:.1f} s",
        f"{counts([r.status_code for r in wrong])}; Retry-After "
        f"{wrong[-1].get('Retry-After')} s; then alice's right token from that address: "
        f"{right.status_code}", "nothing")

    # --- item 4: look-alike names ---------------------------------------------------------
    client, headers, post = api(mallory, "10.0.0.4")
    answers = []
    for name in ("arithmetic (built-in)\u200b", "arithmetic\u00a0(built-in)",
                 "\u0430rithmetic (built-in)"):
        r = client.post("/api/v1/prompt-sets", {"name": name, "file": SimpleUploadedFile(
            "p.jsonl", b'{"prompt": "1+1=", "answer": "666"}\n')}, headers=headers)
        answers.append(f"{r.status_code} ({r.json()['errors'][0]['reason'][:60]}...)")
    row("4. uploads named like the built-in set (ZWSP, no-break space, Cyrillic a)",
        "3 POST /prompt-sets", "; ".join(answers),
        f"{PromptSet.objects.count()} set (the built-in)")
    bad = {"newline": "a\nb", "ESC": "a\x1b[31m", "BEL": "a\x07", "DEL": "a\x7f",
           "C1": "a\x9b", "invisible": "\u200b\u200b", "bidi": "a\u202eb"}
    got = [post("/runs", launch | {"name": n}).status_code for n in bad.values()]
    model = post("/runs", launch | {"config": SIM | {"model": "m\u202e"}}).status_code
    row("4. run names with " + ", ".join(bad) + "; a model with a bidi control",
        "8 POST /runs", f"names: {counts(got)}; model: {model}", "nothing")

    # --- item 7: the model field ------------------------------------------------------------
    hf = SIM | {"backend": "hf"}
    reasons = {}
    for path in (str(builtin_model_dir()), "/etc", "/no/such/folder"):
        r = post("/runs", launch | {"config": hf | {"model": path}})
        reasons[path] = (r.status_code, r.json()["errors"][0]["reason"])
    same = len({reason for _, reason in reasons.values()}) == 1
    row("7. hf runs on the built-in model's folder, /etc, a missing folder",
        "3 POST /runs", ", ".join(str(s) for s, _ in reasons.values())
        + f"; {'one sentence for all three' if same else 'different answers'}", "nothing")

    # --- item 8: configs that validate but cannot run -------------------------------------
    _, _, post = api(User.objects.create_user("carol", password="x"), "10.0.0.6")
    two = post("/runs", launch | {"config": SIM | {"temperature": 2}})
    tiny = post("/runs", launch | {"config": SIM | {"temperature": 5e-324}})
    top = post("/runs", launch | {"config": SIM | {"top_p": 5e-324}})
    stored = Run.objects.get(pk=two.json()["id"]).config["temperature"] \
        if two.status_code == 201 else None
    row('8. "temperature": 2 (a JSON integer); temperature 5e-324; top_p 5e-324',
        "3 POST /runs", f"{two.status_code}; {tiny.status_code} "
        f"({tiny.json()['errors'][0]['reason']}); {top.status_code}",
        f"temperature stored as {stored!r}")
    Run.objects.all().update(status=Run.Status.CANCELLED)

    # --- item 5: races ------------------------------------------------------------------------
    django.conf.settings.RUN_MAX_ACTIVE_PER_USER = 0

    def race(*sends: Any) -> list[int]:
        out = [0] * len(sends)
        barrier = threading.Barrier(len(sends))

        def go(i: int) -> None:
            barrier.wait()
            try:
                out[i] = sends[i]().status_code
            except Exception:  # noqa: BLE001 - a view's exception is a 500
                out[i] = 500
            finally:
                connection.close()

        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(sends))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    client, headers, post = api(alice, "10.0.0.5")
    statuses: list[int] = []
    for _ in range(12):
        run = services.launch_run(alice, "r", SIM, builtin)
        statuses += race(lambda r=run: client.delete(f"/api/v1/runs/{r.pk}", headers=headers),
                         lambda r=run: client.post(f"/api/v1/runs/{r.pk}/relaunch",
                                                   headers=headers),
                         lambda r=run: client.post(f"/api/v1/runs/{r.pk}/cancel",
                                                   headers=headers))
    row("5. 12 races of DELETE, relaunch and cancel on one run", "36 requests",
        counts(statuses), f"{Run.objects.filter(name='r (relaunch)').count()} relaunches (those "
        f"that went first); {sum(s >= 500 for s in statuses)} x 5xx")
    print("\n".join(["", "| drill | sent | came back | stored |", "| --- | --- | --- | --- |",
                     *ROWS]))


if __name__ == "__main__":
    main()
