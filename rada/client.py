"""A small HTTP client of the platform's REST API (/api/v1/), on the standard library's urllib
so that ``python -m rada`` runs on any machine with Python and tqdm (the progress bars): no web
framework, no database driver, no torch.

Hand-written where the standard library has no helper: the multipart/form-data body of an upload
(``_multipart``, a few lines per RFC 7578).
"""

from __future__ import annotations

import json
import mimetypes
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CONFIG_ENV = "RADA_CONFIG"


def config_path() -> Path:
    """Where ``login`` keeps the URL and the token: ``$RADA_CONFIG``, else
    ``$XDG_CONFIG_HOME/rada/credentials.json`` (``~/.config/rada/credentials.json``)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "rada" / "credentials.json"


def save_credentials(url: str, token: str, path: Path | None = None) -> Path:
    """Write the credentials readable by their owner only (mode 0600, set at creation: the
    token is never on disk with wider permissions, not even for a moment)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + f".{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "token": token}, fh)
    os.replace(tmp, path)
    os.chmod(path, 0o600)
    return path


def load_credentials(path: Path | None = None) -> dict[str, str]:
    path = path or config_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def api_root(url: str) -> str:
    """``http://host:8000`` or ``http://host:8000/api/v1/`` -> ``http://host:8000/api/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/api/v1") else url + "/api/v1"


@dataclass
class ApiError(Exception):
    """A response the API refused (status >= 400), or a server that could not be reached
    (status 0)."""

    status: int
    detail: str
    errors: list[dict[str, str]]

    def __str__(self) -> str:
        if self.errors:
            return "; ".join(f"{e.get('field')}: {e.get('reason')}" for e in self.errors)
        return self.detail


class Client:
    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        self.root = api_root(url)
        self.token = token
        self.timeout = timeout

    def _request(self, method: str, path: str, *, params: Any = None, body: bytes | None = None,
                 content_type: str | None = None) -> Any:
        url = self.root + path
        if params:
            items = params.items() if isinstance(params, dict) else params
            url += "?" + urllib.parse.urlencode([(k, v) for k, v in items if v is not None])
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = {"detail": raw.decode(errors="replace")[:500] or exc.reason}
            raise ApiError(exc.code, str(data.get("detail", exc.reason)),
                           list(data.get("errors") or [])) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, f"cannot reach {self.root}: {reason}", []) from None

    def call(self, method: str, path: str, **kw: Any) -> Any:
        with self._request(method, path, **kw) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post_toml(self, path: str, toml: bytes, params: dict[str, Any]) -> Any:
        return self.call("POST", path, body=toml, params=params,
                         content_type="application/toml")

    def upload(self, path: str, fields: dict[str, str], file_field: str, file: Path) -> Any:
        body, content_type = _multipart(fields, file_field, file)
        return self.call("POST", path, body=body, content_type=content_type)

    def download(self, path: str, out: IO[bytes], chunk: int = 1 << 20) -> int:
        """Stream a binary response into ``out``; returns the bytes written."""
        written = 0
        with self._request("GET", path) as response:
            while block := response.read(chunk):
                out.write(block)
                written += len(block)
        return written


def _multipart(fields: dict[str, str], file_field: str, file: Path) -> tuple[bytes, str]:
    boundary = "rada-" + secrets.token_hex(16)
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                     f"{value}\r\n".encode())
    kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    quoted = file.name.replace('"', "%22")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
                 f'filename="{quoted}"\r\nContent-Type: {kind}\r\n\r\n'.encode())
    parts.append(file.read_bytes())
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
