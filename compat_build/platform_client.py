"""Client for the platform's two image-verify calls (build-time tooling, not in any image).

validate:  GET  {api}/adminApi/image-verify/validate?gpuType=..&taskType=..  -> code 0, data true
register:  POST {api}/adminApi/image-verify  {framework, gpuType, imageUrl, taskType, createBy, repoUrl, tag}

Connection errors, timeouts and 5xx are retried with exponential backoff; 4xx is not (it will not
get better). Every error says what failed and what to do; the token never appears in one.
"""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Optional

DEFAULT_API = "https://modelhub.org.cn"


class PlatformError(RuntimeError):
    pass


class PlatformClient:
    def __init__(self, api_base: str = DEFAULT_API, token: Optional[str] = None, timeout: float = 10.0,
                 retries: int = 3, backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api_base = api_base.rstrip("/")
        self._token = token
        self.timeout, self.retries, self.backoff, self._sleep = timeout, retries, backoff, sleep

    def _request(self, what: str, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        url = self.api_base + path
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    hint = "check the API token secret" if exc.code in (401, 403) else "check the request values"
                    raise PlatformError(f"{what}: HTTP {exc.code} from {url}; {hint}") from None
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = f"{getattr(exc, 'reason', exc)}"
        else:
            raise PlatformError(f"{what}: {url} failed {self.retries + 1} times (last: {last}); "
                                "the platform may be down, try again later")
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
            raise PlatformError(f"validate: the platform does not accept gpuType={gpu_type!r} taskType={task_type!r}; "
                                "fix GPU_TYPE/TASK_TYPE in build_matrix.toml")

    def register(self, *, framework: str, gpu_type: str, image_url: str, task_type: str, create_by: str,
                 repo_url: str, tag: str) -> Any:
        return self._request("register", "POST", "/adminApi/image-verify", {
            "framework": framework, "gpuType": gpu_type, "imageUrl": image_url, "taskType": task_type,
            "createBy": create_by, "repoUrl": repo_url, "tag": tag})
