"""``rada``: the platform from a shell, over its REST API (another machine is fine). Installed
with ``pip install ./rada`` (the folder of a checkout; Python and tqdm only) it is the ``rada``
command; from the repository's root it also runs as ``python -m rada``.

    python -m rada login --url http://HOST:8000            # paste a token from /account/
    python -m rada prompt-sets upload data/train.jsonl --name my-set
    python -m rada launch configs/tiny-grpo.toml --prompt-set my-set --sweep seed=0,1,2 --wait
    python -m rada runs --status running
    python -m rada wait --sweep 3
    python -m rada cancel 12 13
    python -m rada retry 14 --wait                         # a sweep's failed run, in its place
    python -m rada export 12 --out run-12/

Exit codes (scripts can branch on them):
    0  done (with --wait: every run succeeded)
    1  with --wait, or `wait`: a run failed or was cancelled
    2  bad input: wrong arguments, or the API refused a value (the field is named)
    3  not signed in: no stored token, or the token was refused (run `login`)
    4  forbidden (not your run) or not found
    5  the server could not be reached, or failed
  130  interrupted (Ctrl-C); the runs go on
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rada.client import (
    ApiError,
    Client,
    api_root,
    config_path,
    load_credentials,
    save_credentials,
)

# How the user called it, for help and messages: the installed command or the module.
PROG = "rada" if Path(sys.argv[0]).name == "rada" else "python -m rada"

EXIT_OK, EXIT_RUN_FAILED, EXIT_INPUT, EXIT_AUTH, EXIT_FORBIDDEN, EXIT_SERVER, EXIT_LIMIT = \
    range(7)
FINISHED = ("succeeded", "failed", "cancelled")
POLL_SECONDS = 2.0


class Failure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def exit_code(error: ApiError) -> int:
    if error.status in (400, 409, 422):  # 409: the object changed under the request
        return EXIT_INPUT
    if error.status == 429:  # a limit or a throttle: the message names it (and the wait)
        return EXIT_LIMIT
    if error.status == 401:
        return EXIT_AUTH
    if error.status in (403, 404):
        return EXIT_FORBIDDEN
    return EXIT_SERVER


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The Reinforce-Ada platform's command-line client (REST API /api/v1/).",
        epilog="examples:\n" + doc.split("\n\n", 1)[1])
    # --url and --token go before or after the command: the subcommands' copies leave the
    # top-level value alone unless given (SUPPRESS).
    common = argparse.ArgumentParser(add_help=False)
    for target, default in ((parser, None), (common, argparse.SUPPRESS)):
        target.add_argument("--url", default=default, help="the platform's address, e.g. "
                            "http://HOST:8000 (default: $RADA_URL, else the one `login` stored)")
        target.add_argument("--token", default=default, help="an API token (default: "
                            "$RADA_TOKEN, else the one `login` stored)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The commands, in the order `rada --help` lists them.
    for add in (_add_login, _add_prompt_sets, _add_launch, _add_runs, _add_wait, _add_cancel,
                _add_retry, _add_export):
        add(sub, common)
    return parser


def _add_login(sub: Any, common: argparse.ArgumentParser) -> None:
    """``login``: check a token and store it."""
    login = sub.add_parser("login", parents=[common],
                           help="check a token and store it (mode 0600)",
                           description="Check an API token (create one on the platform's "
                           "/account/ page) and store the address and the token in "
                           f"{config_path()} (mode 0600; $RADA_CONFIG moves it). The token "
                           "is read from --token, $RADA_TOKEN, or asked for without echo.")
    login.set_defaults(func=cmd_login)


def _add_prompt_sets(sub: Any, common: argparse.ArgumentParser) -> None:
    """``prompt-sets list`` and ``prompt-sets upload``."""
    ps = sub.add_parser("prompt-sets", parents=[common], help="list or upload prompt sets",
                        description="List prompt sets, or upload a JSONL/Parquet file of "
                        "prompts (prompt, answer; verl's layout too).")
    ps_sub = ps.add_subparsers(dest="action", required=True, metavar="ACTION")
    ps_list = ps_sub.add_parser("list", parents=[common], help="the prompt sets",
                                description="The prompt sets.")
    ps_list.set_defaults(func=cmd_prompt_sets_list)
    up = ps_sub.add_parser("upload", parents=[common], help="upload a JSONL or Parquet file",
                           description="Upload a JSONL or Parquet file as a new prompt set.")
    up.add_argument("file", metavar="FILE", type=Path)
    up.add_argument("--name", help="the set's name (default: the file's name without suffix)")
    up.set_defaults(func=cmd_prompt_sets_upload)


def _add_launch(sub: Any, common: argparse.ArgumentParser) -> None:
    """``launch``: a run, or a sweep, from a TOML config."""
    launch = sub.add_parser("launch", parents=[common],
                            help="launch a run (or a sweep) from a TOML config",
                            description="Launch a run from the TOML config of `python -m "
                            "trainer run` (its prompts/eval_prompts keys are replaced by the "
                            "prompt sets), or with --sweep a grid of runs.")
    launch.add_argument("config", metavar="CONFIG.toml", type=Path)
    launch.add_argument("--prompt-set", required=True, metavar="NAME",
                        help="training prompt set (name or id)")
    launch.add_argument("--eval-set", metavar="NAME", help="held-out prompt set (name or id)")
    launch.add_argument("--name", help="run or sweep name (default: the config file's name)")
    launch.add_argument("--queue", default="cpu", help="cpu, gpu or ray (default cpu)")
    launch.add_argument("--retention", default="all", choices=("all", "kept", "none"),
                        help="response texts kept (default all)")
    launch.add_argument("--sweep", metavar="FIELD=V1,V2[;FIELD=...]",
                        help="launch a grid, e.g. seed=0,1,2 or 'algorithm=grpo,ada-balance;"
                        "seed=0..2'; budget=16 (responses per prompt) puts every algorithm "
                        "at one sampling budget: 'algorithm=grpo,dapo,pods;budget=16'")
    launch.add_argument("--wait", action="store_true",
                        help="wait for the runs to finish, with a progress bar per run")
    launch.set_defaults(func=cmd_launch)


def _add_runs(sub: Any, common: argparse.ArgumentParser) -> None:
    """``runs``: list runs."""
    runs = sub.add_parser("runs", parents=[common], help="list runs",
                          description="Runs, newest first.")
    runs.add_argument("--status", choices=("queued", "running", "succeeded", "failed",
                                           "cancelled"))
    runs.add_argument("--algorithm")
    runs.add_argument("--sweep", type=int, metavar="ID")
    runs.add_argument("--mine", action="store_true", help="only my runs")
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true", help="print the API's JSON, one run per "
                      "line (for scripts)")
    runs.set_defaults(func=cmd_runs)


def _add_wait(sub: Any, common: argparse.ArgumentParser) -> None:
    """``wait``: for runs or a sweep."""
    wait = sub.add_parser("wait", parents=[common], help="wait for runs or a sweep to finish",
                          description="Wait, with a progress bar per run, until the runs (or "
                          "every run of the sweep) have finished; exit 1 when one did not "
                          "succeed.")
    wait.add_argument("runs", metavar="RUN_ID", type=int, nargs="*")
    wait.add_argument("--sweep", type=int, metavar="ID", help="wait for a sweep's runs")
    wait.set_defaults(func=cmd_wait)


def _add_cancel(sub: Any, common: argparse.ArgumentParser) -> None:
    """``cancel``: runs or a sweep."""
    cancel = sub.add_parser("cancel", parents=[common], help="cancel runs or a sweep",
                            description="Cancel runs (queued ones stop at once, running ones "
                            "after their current round), or every unfinished run of a sweep.")
    cancel.add_argument("runs", metavar="RUN_ID", type=int, nargs="*")
    cancel.add_argument("--sweep", type=int, metavar="ID", help="cancel a sweep's runs")
    cancel.set_defaults(func=cmd_cancel)


def _add_retry(sub: Any, common: argparse.ArgumentParser) -> None:
    """``retry``: failed or cancelled runs of a sweep, in their place."""
    retry = sub.add_parser("retry", parents=[common],
                           help="retry failed or cancelled runs of a sweep, in their place",
                           description="Run a failed or cancelled run of a sweep again, in its "
                           "place: a new run of the sweep with the same settings; the old one "
                           "keeps its records and is left out of the sweep's status, compare "
                           "and report (`wait --sweep` then waits for the retry).")
    retry.add_argument("runs", metavar="RUN_ID", type=int, nargs="+")
    retry.add_argument("--wait", action="store_true",
                       help="wait for the retries to finish, with a progress bar per run")
    retry.set_defaults(func=cmd_retry)


def _add_export(sub: Any, common: argparse.ArgumentParser) -> None:
    """``export``: a run's Parquet bundle."""
    export = sub.add_parser("export", parents=[common],
                            help="download a run as a Parquet bundle",
                            description="Download a run's Parquet bundle (steps, rounds, "
                            "prompt_steps, samples, evaluations, checkpoints, prompts, "
                            "config.json, manifest.json) and unzip it into a folder.")
    export.add_argument("run", metavar="RUN_ID", type=int)
    export.add_argument("--out", type=Path, help="folder (default run-ID/), or with --zip the "
                        "zip file (default run-ID-bundle.zip)")
    export.add_argument("--zip", action="store_true", help="keep the zip as it is")
    export.set_defaults(func=cmd_export)


# --- commands -----------------------------------------------------------------------------------

def _client(args: argparse.Namespace) -> Client:
    stored = load_credentials()
    url = args.url or os.environ.get("RADA_URL") or stored.get("url")
    token = args.token or os.environ.get("RADA_TOKEN") or stored.get("token")
    if not url or not token:
        raise Failure(EXIT_AUTH, f"not signed in: run `{PROG} login --url URL` (or "
                                 "pass --url and --token)")
    return Client(url, token)


def cmd_login(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("RADA_URL") or load_credentials().get("url")
    if not url:
        raise Failure(EXIT_INPUT, "url: give the platform's address with --url")
    token = args.token or os.environ.get("RADA_TOKEN")
    if not token:
        if not sys.stdin.isatty():
            token = sys.stdin.readline().strip()
        else:
            token = getpass.getpass(f"API token (create one at {url.rstrip('/')}/account/): ")
    if not token:
        raise Failure(EXIT_INPUT, "token: empty")
    me = Client(url, token).get("/me")
    path = save_credentials(api_root(url), token)
    print(f"signed in to {api_root(url)} as {me['username']}; token stored in {path}")
    return EXIT_OK


def cmd_prompt_sets_list(args: argparse.Namespace) -> int:
    rows = _client(args).get("/prompt-sets")
    _table([(p["id"], p["name"], p["source"], p["size"], p["owner"] or "") for p in rows],
           ("id", "name", "source", "prompts", "owner"))
    return EXIT_OK


def cmd_prompt_sets_upload(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise Failure(EXIT_INPUT, f"file: no such file: {args.file}")
    client = _client(args)
    ps = client.upload("/prompt-sets", {"name": args.name or args.file.stem}, "file", args.file)
    # A large file goes on importing after the upload's answer (status "importing").
    while ps.get("status") == "importing":
        fraction = ps.get("import_fraction")
        print(f"importing {ps['name']}: {ps.get('import_rows', 0):,} prompts read"
              + (f" ({fraction:.0%} of the file)" if fraction is not None else ""),
              file=sys.stderr)
        time.sleep(2)
        ps = client.get(f"/prompt-sets/{ps['id']}")
    if ps.get("status") == "failed":
        raise Failure(EXIT_INPUT, f"file: {ps.get('import_error') or 'the import failed'}")
    print(f"prompt set {ps['id']} {ps['name']}: {ps['size']} prompts")
    return EXIT_OK


def cmd_launch(args: argparse.Namespace) -> int:
    try:
        toml = args.config.read_bytes()
    except OSError as exc:
        raise Failure(EXIT_INPUT, f"config: cannot read {args.config}: {exc.strerror}") from None
    client = _client(args)
    params = {"name": args.name or args.config.stem, "prompt_set": args.prompt_set,
              "eval_set": args.eval_set, "queue": args.queue, "retention": args.retention}
    if args.sweep:
        sweep = client.post_toml("/sweeps", toml, {**params, "grid": args.sweep})
        ids = list(sweep["runs"])
        print(f"sweep {sweep['id']} {sweep['name']}: {len(ids)} runs queued "
              f"({', '.join(map(str, ids))})")
        for error in sweep.get("enqueue_errors") or []:
            print(f"warning: {error}", file=sys.stderr)
    else:
        run = client.post_toml("/runs", toml, params)
        ids = [run["id"]]
        print(f"run {run['id']} {run['name']}: queued on {run['queue']}")
    if not args.wait:
        return EXIT_OK
    return wait_for_runs(client, ids)


def wait_for_runs(client: Client, ids: Sequence[int], poll: float = POLL_SECONDS) -> int:
    """A tqdm bar per run (steps recorded of total) until every run has finished."""
    from tqdm import tqdm

    runs = {i: client.get(f"/runs/{i}") for i in ids}
    bars = {i: tqdm(total=r["total_steps"], desc=middle_cut(f"run {i} {r['name']}", 48),
                    unit="step", position=n, leave=True, file=sys.stderr, dynamic_ncols=True)
            for n, (i, r) in enumerate(runs.items())}
    try:
        while True:
            for i, bar in bars.items():
                r = runs[i] = client.get(f"/runs/{i}")
                bar.update(r["current_step"] - bar.n)
                reward = r["latest_real_reward"]
                bar.set_postfix(status=r["status"], samples=r["samples_spent"],
                                reward="-" if reward is None else f"{reward:.3f}", refresh=True)
            if all(r["status"] in FINISHED for r in runs.values()):
                break
            time.sleep(poll)
    finally:
        for bar in bars.values():
            bar.close()
    bad = [r for r in runs.values() if r["status"] != "succeeded"]
    for r in runs.values():
        print(f"run {r['id']} {r['name']}: {r['status']}"
              + (f" ({r['error'].splitlines()[0]})" if r.get("error") else ""))
    return EXIT_RUN_FAILED if bad else EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    if not args.runs and args.sweep is None:
        raise Failure(EXIT_INPUT, "runs: give run ids, or --sweep ID")
    client = _client(args)
    ids = list(args.runs)
    if args.sweep is not None:
        ids += [i for i in client.get(f"/sweeps/{args.sweep}")["runs"] if i not in ids]
    return wait_for_runs(client, ids)


def cmd_runs(args: argparse.Namespace) -> int:
    client = _client(args)
    owner = client.get("/me")["username"] if args.mine else None
    rows = client.get("/runs", status=args.status, algorithm=args.algorithm, sweep=args.sweep,
                      owner=owner, limit=args.limit)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return EXIT_OK
    header = ("id", "name", "algorithm", "status", "step", "samples", "reward", "owner")
    table = [[r["id"], r["name"], r["algorithm"],
              r["status"] + (f" (replaced by {r['replaced_by']})" if r.get("replaced_by")
                             else ""),
              f"{r['current_step']}/{r['total_steps']}", r["samples_spent"],
              "" if r["latest_real_reward"] is None else f"{r['latest_real_reward']:.3f}",
              r["owner"]] for r in rows]
    width = _output_width()
    if width is not None and table:
        # The name column gets what the other columns leave of the line (at least 20).
        others = sum(max(len(str(c)) for c in [h, *(row[i] for row in table)]) + 2
                     for i, h in enumerate(header) if i != 1)
        for row in table:
            row[1] = middle_cut(row[1], max(20, width - others))
    _table([tuple(row) for row in table], header)
    return EXIT_OK


def _output_width() -> int | None:
    """The line width to fit a table to: $COLUMNS, else the terminal's; None when the output
    is not a terminal (a pipe or a file gets whole names, for grep and scripts)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return os.get_terminal_size(sys.stdout.fileno()).columns
    return None


def middle_cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut from the middle: a sweep's runs share their
    start (the sweep's name) and differ at the end (their values, "[algorithm=grpo, seed=1]"),
    so both ends are what tells them apart."""
    if len(text) <= width:
        return text
    tail = (width - 1) * 2 // 3
    return text[:width - 1 - tail] + "…" + text[len(text) - tail:]


def cmd_cancel(args: argparse.Namespace) -> int:
    if not args.runs and args.sweep is None:
        raise Failure(EXIT_INPUT, "runs: give run ids, or --sweep ID")
    client = _client(args)
    if args.sweep is not None:
        n = client.call("POST", f"/sweeps/{args.sweep}/cancel")["cancelled"]
        print(f"sweep {args.sweep}: cancel requested for {n} unfinished runs")
    for run_id in args.runs:
        r = client.call("POST", f"/runs/{run_id}/cancel")
        print(f"run {run_id}: {r['status']}"
              + (" (stops after its current round)" if r["status"] == "running" else ""))
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    client = _client(args)
    ids = []
    for run_id in args.runs:
        new = client.call("POST", f"/runs/{run_id}/retry")
        ids.append(new["id"])
        print(f"run {run_id}: retried in sweep {new['sweep']} as run {new['id']} {new['name']}: "
              f"queued on {new['queue']}")
    return wait_for_runs(client, ids) if args.wait else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    client = _client(args)
    path = f"/runs/{args.run}/export"
    if args.zip:
        out = args.out or Path(f"run-{args.run}-bundle.zip")
        with open(out, "wb") as fh:
            size = client.download(path, fh)
        print(f"run {args.run}: {size / 2**20:.1f} MiB bundle in {out}")
        return EXIT_OK
    folder = args.out or Path(f"run-{args.run}")
    # Through a temporary file: a bundle can be far larger than memory.
    with tempfile.TemporaryFile() as tmp:
        client.download(path, tmp)
        tmp.seek(0)
        with zipfile.ZipFile(tmp) as zf:
            folder.mkdir(parents=True, exist_ok=True)
            zf.extractall(folder)
            names = zf.namelist()
    print(f"run {args.run}: {', '.join(sorted(names))} in {folder}/")
    return EXIT_OK


def _table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> None:
    cells = [tuple(str(c) for c in header), *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except Failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print(f"interrupted (the runs go on: `{PROG} cancel ID` stops one)",
              file=sys.stderr)
        return 130
