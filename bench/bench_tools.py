"""Tool-call sweep (docs/serve.md "Tool calls"): 20 ordinary OpenAI tool definitions (weather,
search, calculator, nested objects, enums, arrays, optional properties, descriptions; none says
`additionalProperties`) asked through `cyb-llm serve`'s app and the `openai` client, with
`tool_choice` "required", named and "auto", greedy and at the model's own sampling defaults.

Usage: PYTHONPATH=python python bench/bench_tools.py [--models qwen05,smollm2] [--max-tokens 200] [--threads 2]
       [--modes required,named,auto] [--temperatures 0.8,1.2] [--verbose]

Per model, mode and setting it prints: calls (answers with tool_calls), parse (every call's
arguments are JSON and its name one of the tools, the named one when named), valid (the
arguments validate with jsonschema against the function's parameters under OpenAI's strict
semantics: no undeclared property, the required ones present), and the answers cut by max_tokens.
For "auto" the questions ask for a tool, so calls is how often the model chose to call one.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import jsonschema  # noqa: E402
import openai  # noqa: E402
import uvicorn  # noqa: E402

import cyb_llm  # noqa: E402
from cyb_llm.serve.app import create_app  # noqa: E402
from cyb_llm.text.toolcalls import strict_parameters  # noqa: E402


def fn(name: str, description: str | None, properties: dict, required: list[str] | None = None) -> dict:
    params: dict = {"type": "object", "properties": properties}
    if required is not None:
        params["required"] = required
    f: dict = {"name": name, "parameters": params}
    if description:
        f["description"] = description
    return {"type": "function", "function": f}


S = {"type": "string"}
#: (tool, question) pairs: ordinary definitions as users write them.
CASES = [
    (fn("get_weather", "Get the current weather in a given location",
        {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["location"]),
     "What's the weather like in Boston today?"),
    (fn("get_weather", None, {"city": S}, ["city"]), "Weather in Paris?"),
    (fn("get_forecast", "Weather forecast for the next days",
        {"city": S, "days": {"type": "integer", "minimum": 1, "maximum": 14, "description": "How many days"}},
        ["city", "days"]), "Give me the 5-day forecast for Tokyo."),
    (fn("web_search", "Search the web",
        {"query": {"type": "string", "description": "What to search for"},
         "num_results": {"type": "integer", "description": "Number of results", "default": 5}}, ["query"]),
     "Search the web for the latest news about the Mars rover."),
    (fn("search_products", "Search the shop's catalogue",
        {"query": S, "category": {"type": "string", "enum": ["books", "electronics", "clothing"]},
         "max_price": {"type": "number"}, "in_stock": {"type": "boolean"}}, ["query"]),
     "Find me electronics under 50 dollars: headphones."),
    (fn("calculator", "Evaluate an arithmetic expression", {"expression": S}, ["expression"]),
     "What is 23 times 17?"),
    (fn("add", "Add two numbers", {"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
     "What is 2 plus 3?"),
    (fn("convert_currency", "Convert an amount between currencies",
        {"amount": {"type": "number"}, "from": {"type": "string", "description": "ISO code"},
         "to": {"type": "string", "description": "ISO code"}}, ["amount", "from", "to"]),
     "How much is 100 US dollars in euros?"),
    (fn("send_email", "Send an email",
        {"to": {"type": "string", "description": "Recipient address"}, "subject": S, "body": S,
         "cc": {"type": "array", "items": S}}, ["to", "subject", "body"]),
     "Email bob@example.com that the meeting moved to 3pm."),
    (fn("create_event", "Create a calendar event",
        {"title": S, "start": {"type": "string", "description": "ISO 8601 date-time"},
         "duration_minutes": {"type": "integer"},
         "attendees": {"type": "array", "items": {"type": "object", "properties": {
             "name": S, "email": S}, "required": ["email"]}}}, ["title", "start"]),
     "Schedule a team lunch tomorrow at noon for an hour with alice@example.com."),
    (fn("book_flight", "Book a flight",
        {"origin": S, "destination": S, "date": S,
         "passenger": {"type": "object", "properties": {"first_name": S, "last_name": S,
                                                        "age": {"type": "integer"}},
                       "required": ["first_name", "last_name"]},
         "class": {"type": "string", "enum": ["economy", "business", "first"]}},
        ["origin", "destination", "date", "passenger"]),
     "Book John Smith on a flight from London to New York on 2025-03-14, economy."),
    (fn("set_thermostat", None, {"temperature": {"type": "number"},
                                 "mode": {"type": "string", "enum": ["heat", "cool", "auto"]}}, ["temperature"]),
     "Set the heating to 21 degrees."),
    (fn("get_stock_price", "Current price of a stock", {"ticker": {"type": "string", "description": "e.g. AAPL"}},
        ["ticker"]), "How much is Apple stock right now?"),
    (fn("translate", "Translate text",
        {"text": S, "target_language": {"type": "string", "description": "Language name"},
         "source_language": S}, ["text", "target_language"]),
     "Translate 'good morning' into Spanish."),
    (fn("create_todo", "Add items to the to-do list",
        {"items": {"type": "array", "items": S, "description": "The tasks"},
         "priority": {"type": "string", "enum": ["low", "medium", "high"]}}, ["items"]),
     "Add buy milk and call mom to my to-do list."),
    (fn("get_directions", "Route between two places",
        {"origin": S, "destination": S,
         "mode": {"type": "string", "enum": ["driving", "walking", "transit", "cycling"]},
         "avoid": {"type": "array", "items": {"type": "string", "enum": ["tolls", "highways", "ferries"]}}},
        ["origin", "destination"]),
     "How do I walk from the Louvre to the Eiffel Tower?"),
    (fn("query_database", "Run a filtered query",
        {"table": S, "filters": {"type": "object", "properties": {
            "field": S, "op": {"type": "string", "enum": ["=", "<", ">"]}, "value": S}},
         "limit": {"type": "integer"}}, ["table"]),
     "Show me the 10 newest rows of the orders table where status = shipped."),
    (fn("get_time", "Current time in a time zone", {"timezone": {"type": "string", "description": "IANA name"}}),
     "What time is it in Tokyo?"),
    (fn("play_music", "Play a song",
        {"song": S, "artist": S, "volume": {"type": "integer", "minimum": 0, "maximum": 100}}, ["song"]),
     "Play Yesterday by the Beatles."),
    (fn("update_profile", "Update the user's profile",
        {"user": {"type": "object", "properties": {
            "name": S, "address": {"type": "object", "properties": {
                "street": S, "city": S, "zip": S}, "required": ["city"]},
            "tags": {"type": "array", "items": S}}, "required": ["name"]}}, ["user"]),
     "Change my name to Ana Lopez and my city to Madrid."),
]


def serve(models: dict):
    app = create_app(models, ctx=2048)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, t, f"http://127.0.0.1:{port}/v1"


def check(call, fn_: dict, names: set[str], want: str | None) -> tuple[bool, bool]:
    """(parses, validates) of one call."""
    try:
        args = json.loads(call.function.arguments)
    except ValueError:
        return False, False
    if call.function.name not in names or (want and call.function.name != want) or not isinstance(args, dict):
        return False, False
    schema = strict_parameters(fn_["parameters"])
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError:
        return True, False
    return True, True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="qwen05,smollm2")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", type=int, default=len(CASES))
    ap.add_argument("--modes", default="required,named,auto")
    ap.add_argument("--temperatures", default="",
                    help="extra settings: comma-separated temperatures (besides greedy and the model's defaults)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    cases = CASES[:a.cases]
    for name in a.models.split(","):
        model = cyb_llm.load(name, threads=a.threads)
        server, t, url = serve({name: model})
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
        try:
            settings = [("greedy", 0), ("defaults", None)] + \
                [(f"t={t}", float(t)) for t in a.temperatures.split(",") if t]
            for mode in a.modes.split(","):
                for setting, temp in settings:
                    n = calls = parsed = valid = cut = 0
                    t0 = time.time()
                    for i, (tool, question) in enumerate(cases):
                        # one other tool beside the one asked for, so that "required" and "auto" choose
                        other = cases[(i + 1) % len(cases)][0]
                        tools = [tool] if other["function"]["name"] == tool["function"]["name"] else [tool, other]
                        choice = {"required": "required", "auto": "auto",
                                  "named": {"type": "function", "function": {"name": tool["function"]["name"]}}}[mode]
                        r = client.chat.completions.create(
                            model=name, messages=[{"role": "user", "content": question}], tools=tools,
                            tool_choice=choice, max_tokens=a.max_tokens, seed=i,
                            **({"temperature": temp} if temp is not None else {}))
                        ch = r.choices[0]
                        n += 1
                        cut += ch.finish_reason == "length"
                        tcs = ch.message.tool_calls or []
                        fns = {tl["function"]["name"]: tl["function"] for tl in tools}
                        if tcs:
                            calls += 1
                            res = [check(c, fns.get(c.function.name, tool["function"]), set(fns),
                                         tool["function"]["name"] if mode == "named" else None) for c in tcs]
                            parsed += all(p for p, _ in res)
                            valid += all(v for _, v in res)
                        if a.verbose:
                            print(f"  {mode} {setting} {tool['function']['name']}: {ch.finish_reason} "
                                  f"{[(c.function.name, c.function.arguments) for c in tcs]} "
                                  f"{(ch.message.content or '')[:80]!r}", flush=True)
                    base = n if mode != "auto" else max(calls, 1)
                    print(f"{name:8s} {mode:8s} {setting:8s} calls {calls}/{n}  parse {parsed}/{base} "
                          f"({100 * parsed / base:.0f} %)  valid {valid}/{base} ({100 * valid / base:.0f} %)  "
                          f"cut by max_tokens {cut}  {time.time() - t0:.0f} s", flush=True)
        finally:
            server.should_exit = True
            t.join(15)


if __name__ == "__main__":
    main()
