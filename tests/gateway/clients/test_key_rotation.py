"""A rotated key is dead on its next request in every web process: keys are looked up in the
database on each call, never cached in a process."""

from __future__ import annotations

import httpx


def test_a_rotated_key_fails_on_its_next_request_in_every_process(
    api, v1, second_web_process, project, project_key, asgi_url
):
    from gateway.clients.models import GatewayKey

    def models(base: str, key: str) -> httpx.Response:
        return httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)

    for base in (asgi_url, second_web_process.url):
        assert models(base, project_key).status_code == 200
    key_id = GatewayKey.objects.get(prefix=project_key[:15]).pk
    rotated = api("admin").post(f"/admin/api/keys/{key_id}/rotate")
    assert rotated.status_code == 200
    new_key = rotated.json()["key"]
    assert new_key != project_key and rotated.json()["api_key"]["id"] == key_id
    for base in (asgi_url, second_web_process.url):
        refused = models(base, project_key)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "invalid_api_key"
        assert models(base, new_key).status_code == 200
