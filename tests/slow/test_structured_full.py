"""Slow tier: the full structured-output set of tests/test_structured.py: all 20 JSON schemas x 3
seeds (sampled) and greedy, through a live `cyb-llm serve` app and the official `openai` client,
with the default model; every answer completes ("stop") and validates with jsonschema."""
from __future__ import annotations

import json

import pytest

import test_structured as ts

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import cyb_llm
    from test_serve import serving

    with serving({"smollm2": cyb_llm.load(cyb_llm.hub.DEFAULT_MODEL, threads=2)}, parallel=2, ctx=512) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("i", range(len(ts.SCHEMAS)), ids=[s[0] for s in ts.SCHEMAS])
@pytest.mark.parametrize("seed", [None, 1, 2, 3], ids=["greedy", "seed1", "seed2", "seed3"])
def test_json_schema_output_validates_full(client, i, seed):
    what, schema = ts.SCHEMAS[i]
    r = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": f"Give me {what} as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}},
        seed=seed, temperature=0 if seed is None else ts.SAMPLED, max_tokens=ts.MAX_TOKENS)
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
