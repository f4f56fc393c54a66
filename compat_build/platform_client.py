"""Client for the platform's two image-verify calls (build-time tooling, not in any image).

validate:  GET  {api}/adminApi/image-verify/validate?gpuType=..&taskType=..  -> code 0, data true
register:  POST {api}/adminApi/image-verify  {framework, gpuType, imageUrl, taskType, createBy, repoUrl, tag}

Connection errors, timeouts and 5xx are retried by urllib3's Retry, mounted on a requests session
(which brings the proxy and CA settings of the environment): the first retry at once, then after
backoff, 2*backoff, ... seconds, and a 429/503's Retry-After is obeyed; 4xx is not retried (it
will not get better). Every error says what failed and what to do; the token never appears in
one. requests and urllib3 come with the release tooling (envs/release) and are imported at the
first call, so the workflow steps that make no call run on a bare Python.
"""

import json
import urllib.parse
from typing import Any, Dict, Optional

DEFAULT_API = "https://modelhub.org.cn"
RETRY_STATUSES = tuple(range(500, 600))


class PlatformError(RuntimeError):
    pass


class PlatformClient:
    def __init__(
        self, api_base: str = DEFAULT_API, token: Optional[str] = None, timeout: float = 10.0, retries: int = 3, backoff: float = 0.5
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self._token = token
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._session = None

    def retry_policy(self):
        """`retries` retries of any method (register's POST too, as before) on connection errors,
        timeouts and 5xx; after the last, a 5xx answer is returned to us, not raised."""
        from urllib3.util import Retry

        return Retry(
            total=self.retries,
            backoff_factor=self.backoff / 2,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=None,
            raise_on_status=False,
        )

    def _send(self, method: str, url: str, body: Optional[Dict[str, Any]]):
        import requests
        from requests.adapters import HTTPAdapter

        if self._session is None:
            self._session = requests.Session()
            self._session.mount("http://", HTTPAdapter(max_retries=self.retry_policy()))
            self._session.mount("https://", HTTPAdapter(max_retries=self.retry_policy()))
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = json.dumps(body).encode() if body is not None else None
        return self._session.request(method, url, data=data, headers=headers, timeout=self.timeout, allow_redirects=False)

    def _request(self, what: str, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        from requests.exceptions import RequestException

        url = self.api_base + path
        tries = f"{url} failed {self.retries + 1} times"
        try:
            resp = self._send(method, url, body)
        except RequestException as exc:
            raise PlatformError(f"{what}: {tries} (last: {_reason(exc)}); the platform may be down, try again later") from None
        if resp.status_code >= 500:
            raise PlatformError(f"{what}: {tries} (last: HTTP {resp.status_code}); the platform may be down, try again later")
        if resp.status_code >= 400:
            hint = "check the API token secret" if resp.status_code in (401, 403) else "check the request values"
            raise PlatformError(f"{what}: HTTP {resp.status_code} from {url}; {hint}")
        raw = resp.content
        try:
            payload = json.loads(raw)
        except ValueError:
            raise PlatformError(f"{what}: {url} answered with non-JSON ({raw[:80]!r})") from None
        if not isinstance(payload, dict) or payload.get("code") != 0:
            message = payload.get("msg") or payload.get("message") if isinstance(payload, dict) else None
            code = payload.get("code") if isinstance(payload, dict) else None
            raise PlatformError(f"{what}: platform refused (code {code!r}: {message or 'no message'})")
        return payload.get("data")

    def validate(self, gpu_type: str, task_type: str) -> None:
        """Raise unless the platform accepts this gpuType/taskType pair."""
        query = urllib.parse.urlencode({"gpuType": gpu_type, "taskType": task_type})
        data = self._request("validate", "GET", f"/adminApi/image-verify/validate?{query}")
        if data is not True:
            raise PlatformError(
                f"validate: the platform does not accept gpuType={gpu_type!r} taskType={task_type!r}; "
                "fix GPU_TYPE/TASK_TYPE in build_matrix.toml"
            )

    def register(self, *, framework: str, gpu_type: str, image_url: str, task_type: str, create_by: str, repo_url: str, tag: str) -> Any:
        return self._request(
            "register",
            "POST",
            "/adminApi/image-verify",
            {
                "framework": framework,
                "gpuType": gpu_type,
                "imageUrl": image_url,
                "taskType": task_type,
                "createBy": create_by,
                "repoUrl": repo_url,
                "tag": tag,
            },
        )


def _reason(exc: BaseException) -> str:
    """The last failure behind a requests error: urllib3's reason (connection refused, read timed
    out), without the pool's repr it is wrapped in."""
    inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else exc
    reason = getattr(inner, "reason", None) or inner
    text = str(reason)
    return text.split(": ", 1)[1] if text.startswith(("HTTPConnection", "<urllib3")) and ": " in text else text
