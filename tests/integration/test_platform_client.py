"""The platform client against a real HTTP server on 127.0.0.1 with scripted faults."""

import json
from types import SimpleNamespace

import pytest

from compat_build.platform_client import PlatformClient, PlatformError
from tests.conftest import TOKEN
from harness.ports import free_port


def test_validate_sends_query_and_accepts_true(platform):
    platform["client"].validate("Iluvatar_bi-100", "text-generation")
    method, path, auth, _ = platform["requests"][0]
    assert method == "GET" and path == "/adminApi/image-verify/validate?gpuType=Iluvatar_bi-100&taskType=text-generation"
    assert auth == f"Bearer {TOKEN}"


def test_register_posts_every_field(platform):
    platform["script"] = [(200, {"code": 0, "data": {"id": 7}})]
    data = platform["client"].register(
        framework="vllm_compat",
        gpu_type="hygon_k100-ai",
        image_url="r/x:v1",
        task_type="text-generation",
        create_by="ci",
        repo_url="https://git/x",
        tag="v1",
    )
    assert data == {"id": 7}
    body = json.loads(platform["requests"][0][3])
    assert body == {
        "framework": "vllm_compat",
        "gpuType": "hygon_k100-ai",
        "imageUrl": "r/x:v1",
        "taskType": "text-generation",
        "createBy": "ci",
        "repoUrl": "https://git/x",
        "tag": "v1",
    }


def test_5xx_and_timeouts_are_retried(platform):
    platform["script"] = [(500, {"code": 1}), "hang", (200, {"code": 0, "data": True})]
    platform["client"].validate("g", "t")
    assert len(platform["requests"]) == 3


def test_gives_up_after_retries_with_advice(platform):
    platform["script"] = [(502, b"bad gateway")] * 3
    with pytest.raises(PlatformError, match="failed 3 times .*HTTP 502.*try again later"):
        platform["client"].validate("g", "t")


@pytest.mark.parametrize("status, hint", [(401, "API token"), (404, "request values")])
def test_4xx_is_not_retried_and_never_shows_the_token(platform, status, hint):
    platform["script"] = [(status, {"code": status})]
    with pytest.raises(PlatformError) as err:
        platform["client"].register(framework="f", gpu_type="g", image_url="i", task_type="t", create_by="c", repo_url="r", tag="v")
    assert len(platform["requests"]) == 1 and hint in str(err.value) and TOKEN not in str(err.value)


@pytest.mark.parametrize(
    "body, needle",
    [
        (b"<html>oops</html>", "non-JSON"),
        ({"code": 3, "msg": "gpuType unknown"}, "code 3: gpuType unknown"),
        ({"code": 0, "data": False}, "does not accept gpuType='g'"),
    ],
)
def test_bad_answers(platform, body, needle):
    platform["script"] = [(200, body)]
    with pytest.raises(PlatformError, match=needle.replace("(", r"\(")) as err:
        platform["client"].validate("g", "t")
    assert TOKEN not in str(err.value)


def test_connection_refused_is_retried_then_explained(monkeypatch):
    """The retries are urllib3's Retry: the first at once, then exponential backoff (the sleeps
    are taken from urllib3's own sleep call)."""
    import time

    import urllib3.util.retry

    sleeps = []
    monkeypatch.setattr(urllib3.util.retry, "time", SimpleNamespace(sleep=sleeps.append, time=time.time))
    port = free_port()  # nothing listens there
    client = PlatformClient(f"http://127.0.0.1:{port}", retries=3, backoff=0.5)
    with pytest.raises(PlatformError, match="failed 4 times .*Connection refused.*try again later"):
        client.validate("g", "t")
    assert sleeps == [0.5, 1.0]  # after the 2nd and 3rd failure; the 4th gives up


def test_retry_policy_is_urllib3s():
    from urllib3.util import Retry

    policy = PlatformClient("http://x", retries=2, backoff=0.5).retry_policy()
    assert isinstance(policy, Retry) and policy.total == 2 and 503 in policy.status_forcelist
    assert 404 not in policy.status_forcelist and policy.allowed_methods is None  # POST is retried too
