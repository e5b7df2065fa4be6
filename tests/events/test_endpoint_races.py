"""A change and a delete racing on one webhook endpoint: one after the other, never a 500."""

import asyncio


async def test_changes_racing_a_delete_end_in_404_not_500(client, caller):
    for _ in range(5):
        made = await client.post(
            "/integrations/v1/webhook-endpoints",
            json={"url": "https://example.com/hook"},
            headers=caller.headers,
        )
        assert made.status_code == 201, made.text
        path = f"/integrations/v1/webhook-endpoints/{made.json()['id']}"
        answers = await asyncio.gather(
            *(client.patch(path, json={"events": None}, headers=caller.headers) for _ in range(4)),
            client.delete(path, headers=caller.headers),
            *(client.post(f"{path}/disable", headers=caller.headers) for _ in range(2)),
        )
        assert all(a.status_code < 500 for a in answers), [a.text for a in answers]
        assert {a.status_code for a in answers} <= {200, 204, 404}
        assert (await client.get(path, headers=caller.headers)).status_code == 404
