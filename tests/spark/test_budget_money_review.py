"""Budgets in tokens and money against what an adversarial review tried through the public API
(each test failed when it was written; its docstring says what was seen then), on real local
OpenAI-compatible servers: one that bills scripted usage per prompt (like odd real services) and
the test server. A usage with a part left out is billed from its total, an unreadable count keeps
the estimate, batched embeddings share each request's bill, a 429 bills nothing, the plan sums
the calls left, a call dearer than the whole budget says so, float crumbs never refuse a call."""
from __future__ import annotations

import threading

import pytest
from aiohttp import web

import aiospark
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, Price
from tests.support.openai_server import OpenAIServer, answer, tokens

KEY = "sk-money-review-S3cret"
PRICE = Price(input=100.0, output=300.0)  # per 1M tokens
SCHEMA = "id INT, prompt STRING, answer STRING"

pytestmark = pytest.mark.version_agnostic  # budgets' Spark surface is the entry points'; main leg only


class ScriptedServer(OpenAIServer):
    """The test server, whose chat answers carry ``usage_for[prompt]`` as their ``usage`` where
    scripted (the key ``"usage"`` left out when the script is ``...``), and whose embeddings bill
    ``embed_scale`` times the words (a provider whose tokenizer counts more than the estimate)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.usage_for: dict = {}
        self.embed_scale = 1
        self.lock = threading.Lock()

    async def chat(self, request: web.Request) -> web.Response:
        resp = await super().chat(request)
        body = await request.json()
        last = [m.get("content", "") for m in body.get("messages") or [] if m.get("role") == "user"][-1]
        if resp.status != 200 or last not in self.usage_for:
            return resp
        import json

        payload = json.loads(resp.text)
        scripted = self.usage_for[last]
        if scripted is ...:
            payload.pop("usage", None)
        else:
            payload["usage"] = scripted
        return web.json_response(payload)

    async def embeddings(self, request: web.Request) -> web.Response:
        resp = await super().embeddings(request)
        if resp.status != 200 or self.embed_scale == 1:
            return resp
        import json

        payload = json.loads(resp.text)
        payload["usage"] = {k: v * self.embed_scale for k, v in payload["usage"].items()}
        return web.json_response(payload)


@pytest.fixture(scope="module")
def server():
    with ScriptedServer(api_key=KEY) as running:
        yield running


@pytest.fixture
def srv(server):
    server.reset()
    server.usage_for.clear()
    server.embed_scale = 1
    return server


def df_of(spark, prompts, partitions=1):
    return spark.createDataFrame(list(enumerate(prompts)), "id INT, prompt STRING").repartition(partitions)


def chat(srv, **kw):
    kw.setdefault("max_tokens", 16)
    kw.setdefault("price", PRICE)
    return OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, **kw)



def run_one(spark, srv, prompt, usage="cost", limit=10.0):
    """One call of ``prompt`` under a fresh budget in ``usage``: (error, estimate, spent, usage recorded)."""
    fn = chat(srv)
    cost = fn.budget_cost(usage)
    budget = aiospark.Budget(limit, cost=cost)
    out = aiospark.unordered_wait(df_of(spark, [prompt]), fn, SCHEMA, budget=budget, on_error="row")
    (row,) = out.collect()
    return row._error, cost({"prompt": prompt}), budget.spent, dict(out.aiospark_metrics.total.usage)


# the bill these answers state: 100 prompt tokens and 5 completion tokens, at PRICE
STATED = (100 * 100.0 + 5 * 300.0) / 1e6


@pytest.mark.parametrize("usage", [
    {"completion_tokens": 5, "total_tokens": 105},                        # no prompt_tokens
    {"prompt_tokens": None, "completion_tokens": 5, "total_tokens": 105},  # a null one
    {"prompt_tokens": 100, "total_tokens": 105},                           # no completion_tokens
], ids=["no-prompt", "null-prompt", "no-completion"])
def test_a_usage_with_a_part_missing_is_billed_from_its_total(spark, srv, usage):
    """total_tokens says 105 were billed: the cost must count them all (the missing part is
    total - the other), not only the part given; else the budget gives back money that was billed."""
    prompt = "partial usage please"
    srv.usage_for[prompt] = usage
    error, estimate, spent, recorded = run_one(spark, srv, prompt)
    assert error is None
    assert recorded["cost"] == pytest.approx(STATED)
    assert spent == pytest.approx(STATED)


@pytest.mark.parametrize("prompt_tokens", ["100", -100, 10**30, 12.5], ids=["string", "negative", "huge", "fraction"])
def test_an_unreadable_prompt_count_does_not_reconcile_the_budget_to_the_completion_alone(spark, srv, prompt_tokens):
    """prompt_tokens that are not a token count: the bill is unknown, so the budget must keep (at
    least) its estimate, as it does when usage is missing; it must not settle on the completion
    tokens' price alone (0.0015 here) as if the prompt had been free."""
    prompt = "unreadable prompt count"
    srv.usage_for[prompt] = {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": 105}
    error, estimate, spent, recorded = run_one(spark, srv, prompt)
    assert error is None
    assert spent >= estimate * (1 - 1e-9), (spent, estimate, recorded)


def test_batched_embeddings_budget_counts_what_was_billed(spark, srv):
    """Embeddings go 4 rows a request; the provider bills 5x the words (another tokenizer). The
    budget must end at the bill and stop within the bound of the calls in flight; it counts the
    estimates only, and the bill runs to 4x the limit."""
    srv.embed_scale = 5
    texts = [f"text number {i} here" for i in range(40)]
    emb = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, price=Price(20.0), batch_size=8)
    cost = emb.budget_cost("total_tokens")
    per_row_error = 5 * tokens(texts[0]) - cost({"text": texts[0]})
    limit, capacity = 100, 4
    budget = aiospark.Budget(limit, cost=cost)
    df = spark.createDataFrame(list(enumerate(texts)), "id INT, text STRING").repartition(1)
    out = aiospark.unordered_wait(df, emb, emb.output_schema(df), budget=budget, on_error="row", capacity=capacity)
    out.collect()
    bill = out.aiospark_metrics.total.usage["total_tokens"]
    assert budget.spent == bill
    assert bill <= limit + capacity * per_row_error, (bill, budget.spent)


def test_throttled_attempts_do_not_drain_the_budget(spark, srv):
    """Each row gets 429 twice before its answer (a 429 is never billed). The budget covers every
    row's estimate once: all rows must be answered and the pot must end at the bill; the 429s'
    estimates are kept, so 4 of 6 rows are refused with 114 tokens spent for a bill of 14."""
    from aiospark.connectors.openai import default_retry

    srv.throttle_times, srv.retry_after = 2, "0"
    prompts = [f"throttle me {i}" for i in range(6)]
    fn = chat(srv)
    cost = fn.budget_cost("total_tokens")
    budget = aiospark.Budget(sum(cost({"prompt": p}) for p in prompts) + 1, cost=cost)
    out = aiospark.unordered_wait(df_of(spark, prompts), fn, SCHEMA, budget=budget, on_error="row",
                                  retry=default_retry(), capacity=1)
    rows = out.collect()
    bill = out.aiospark_metrics.total.usage["total_tokens"]
    assert [r._error for r in rows] == [None] * 6
    assert budget.spent == bill == sum(tokens(p) + tokens(answer(p)) for p in prompts)


def test_plan_over_a_journal_estimates_the_calls_left_not_an_average(spark, srv, tmp_path):
    """10 long prompts are answered in the journal, 3 short ones are left: the plan's tokens and
    cost must be those of the 3 calls left (what their budget_cost estimates, and what the plan
    says for them without the journal), not the rows' average times 3."""
    fn = chat(srv)
    cost, tok = fn.budget_cost(), fn.budget_cost("total_tokens")
    done = [f"long prompt number {i} " * 20 for i in range(10)]
    journal = aiospark.Journal(str(tmp_path / "j"), key="id")
    aiospark.unordered_wait(df_of(spark, done), fn, SCHEMA, journal=journal).collect()
    new = [f"new {i}" for i in range(3)]
    p = aiospark.plan(aiospark.unordered_wait, df_of(spark, done + new), fn, SCHEMA, journal=journal)
    assert p.calls == 3
    assert p.tokens == sum(tok({"prompt": x}) for x in new)
    assert p.cost_live == pytest.approx(sum(cost({"prompt": x}) for x in new))


def test_a_call_dearer_than_the_whole_budget_says_so(spark, srv):
    """The budget is untouched (spent 0) but one call's estimate is more than the limit: the error
    must say that (the estimate is above the budget), not that "the budget is spent"."""
    fn = chat(srv)
    cost = fn.budget_cost()
    estimate = cost({"prompt": "tiny prompt"})
    budget = aiospark.Budget(estimate / 2, cost=cost)
    out = aiospark.unordered_wait(df_of(spark, ["tiny prompt"]), fn, SCHEMA, budget=budget, on_error="row")
    (row,) = out.collect()
    assert budget.spent == 0 and srv.seen == []
    assert "estimate" in row._error, row._error


def test_a_budget_of_exactly_three_calls_runs_three(spark, srv):
    """Budget(0.30) of calls costing 0.10 each: 0.1 + 0.1 + 0.1 is 0.30000000000000004 in floats,
    and the third row is refused with the budget 'spent' at 0.2 (left 0.1)."""
    budget = aiospark.Budget(0.3, cost=lambda row: 0.1)
    out = aiospark.unordered_wait(df_of(spark, ["a", "b", "c"]), chat(srv), SCHEMA, budget=budget, on_error="row")
    assert [r._error for r in out.collect()] == [None] * 3
