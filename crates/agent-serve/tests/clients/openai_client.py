"""The official `openai` Python SDK against `agent serve`'s OpenAI routes.

Usage: openai_client.py BASE_URL KEY. Exits non-zero (with the failing assertion) on any
difference from what the SDK expects.
"""
import sys

import openai
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)

models = [m.id for m in client.models.list()]
assert "echo" in models, models

plain = client.chat.completions.create(
    model="echo",
    messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
)
assert plain.choices[0].message.role == "assistant"
assert plain.choices[0].message.content == "echo: hi (2 messages)", plain
assert plain.choices[0].finish_reason == "stop"
assert plain.usage.total_tokens == 15, plain.usage

# The raw stream, chunk by chunk, with usage at the end.
chunks = list(
    client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert text == "echo: stream me (1 messages)", text
assert len({c.id for c in chunks}) == 1
assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 15, chunks[-1]

# The SDK's stream helper builds the message from the deltas.
with client.chat.completions.stream(
    model="echo", messages=[{"role": "user", "content": "helper"}]
) as stream:
    for _ in stream:
        pass
    final = stream.get_final_completion()
assert final.choices[0].message.content == "echo: helper (1 messages)", final
assert final.choices[0].message.role == "assistant"

# Errors arrive as the SDK's typed exceptions with the right status.
try:
    client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as error:
    assert error.status_code == 404
try:
    client.chat.completions.create(model="echo", messages=[{"role": "robot", "content": "x"}])
    raise AssertionError("an unknown role was accepted")
except openai.BadRequestError as error:
    assert error.status_code == 400
try:
    OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0).models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as error:
    assert error.status_code == 401

# The Responses API, whole and streamed (the SDK's helper checks the event order).
response = client.responses.create(model="echo", input="respond")
assert response.status == "completed", response
assert response.output_text == "echo: respond (1 messages)", response
with client.responses.stream(model="echo", input="stream a response", instructions="be brief") as stream:
    kinds = [event.type for event in stream]
    final = stream.get_final_response()
assert final.output_text == "echo: stream a response (2 messages)", final
assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
assert "response.output_text.delta" in kinds, kinds
assert final.usage.total_tokens == 15, final.usage

print("openai: models, chat, streamed chat with usage, the stream helper, typed errors, responses (whole and streamed): ok")
