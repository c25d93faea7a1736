"""Budgets in tokens and money with the OpenAI connectors, through the Spark entry points against
a real OpenAI-compatible server on 127.0.0.1 (it counts a text's words as its tokens, so the bill
is known): every call records its ``cost`` at the model's price (the batch lane at its discount),
a money budget holds against what was billed (its estimates reconciled both ways), the overshoot
of estimates below the bill is bounded by the calls in flight, the rows not started are error rows
saying the budget is spent, and ``aiospark.plan`` prints the tokens and both lanes' cost."""
from __future__ import annotations

import math

import pytest

import aiospark
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, Price
from aiospark.core.metrics import OperatorMetrics
from aiospark.core.usage import bind_usage
from tests.support.openai_fixtures import openai_fixtures
from tests.support.openai_server import answer, tokens
from tests.support.servers import RedisServer

KEY = "sk-money-S3cret-abcdef"

server, srv = openai_fixtures(KEY)

PRICE = Price(input=100.0, output=300.0, cached_input=50.0)  # per 1M tokens


def billed(prompt: str) -> tuple[int, int]:
    """(prompt, completion) tokens the server bills for one chat call of ``prompt``."""
    return tokens(prompt), tokens(answer(prompt))


def money(prompt: str, price: Price = PRICE) -> float:
    p, c = billed(prompt)
    return (p * price.input + c * price.output) / 1e6


def prompts_df(spark, prompts, partitions=2):
    return spark.createDataFrame(list(enumerate(prompts)), "id INT, prompt STRING").repartition(partitions)


def test_every_call_records_its_cost_and_metrics_add_it_up(spark, srv):
    prompts = [f"how much is {i} plus {i}" for i in range(40)]
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=16, price={"chat": PRICE})
    out = aiospark.unordered_wait(prompts_df(spark, prompts), chat, "id INT, prompt STRING, answer STRING",
                                  capacity=8)
    assert len(out.collect()) == 40
    usage = out.aiospark_metrics.total.usage
    assert usage["cost"] == pytest.approx(sum(money(p) for p in prompts), rel=1e-9)
    texts = [f"text number {i}" for i in range(30)]
    embed = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, price=Price(20.0), batch_size=8)
    df = spark.createDataFrame(list(enumerate(texts)), "id INT, text STRING")
    out = aiospark.unordered_wait(df, embed, embed.output_schema(df))
    out.collect()
    assert out.aiospark_metrics.total.usage["cost"] == pytest.approx(sum(tokens(t) for t in texts) * 20.0 / 1e6)


def test_an_answer_of_the_batch_lane_is_billed_at_the_discount_and_cached_tokens_at_their_price(srv):
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=16,
                      price=Price(input=100.0, output=300.0, cached_input=50.0, batch_discount=0.25))
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
             "prompt_tokens_details": {"cached_tokens": 400}}
    metrics = OperatorMetrics()
    bind_usage(metrics)
    live = (600 * 100.0 + 400 * 50.0 + 100 * 300.0) / 1e6
    chat._settle(10, usage)
    assert metrics.usage["cost"] == pytest.approx(live)
    chat._settle(10, usage, lane="batch")
    assert metrics.usage["cost"] == pytest.approx(live + live * 0.75)
    with pytest.raises(ValueError, match="lane"):
        chat._settle(10, usage, lane="cheap")


def test_a_money_budget_holds_against_the_billed_cost(spark, srv):
    """Estimates (prompt characters / 4 + max_tokens, at the live price) are above the bill here:
    each call gives the difference back, so the pot counts exactly what was billed, never more than
    the limit; the rows not started are error rows saying the budget is spent."""
    prompts = [f"hello there friend number {i}" for i in range(200)]
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=16, price=PRICE)
    cost = chat.budget_cost()
    estimate = cost({"id": 0, "prompt": prompts[0]})
    assert estimate > money(prompts[0])  # the reconciliation has something to give back
    limit = 0.1
    budget = aiospark.Budget(limit, cost=cost)
    out = aiospark.unordered_wait(prompts_df(spark, prompts), chat, "id INT, prompt STRING, answer STRING",
                                  capacity=4, budget=budget, on_error="row")
    rows = out.collect()
    assert len(rows) == 200
    answered = [r for r in rows if r._error is None]
    spent_rows = [r for r in rows if r._error is not None]
    assert answered and spent_rows
    assert all("budget is spent" in r._error for r in spent_rows)
    assert all(r.answer == answer(r.prompt) for r in answered)
    bill = out.aiospark_metrics.total.usage["cost"]
    assert bill == pytest.approx(sum(money(r.prompt) for r in answered))
    assert bill <= limit + 1e-9
    assert budget.spent == pytest.approx(bill)          # the pot holds what was billed, not the estimates
    assert len(answered) * estimate > limit              # more calls started than estimates alone allow


def test_estimates_below_the_bill_are_charged_and_the_overshoot_is_bounded_by_the_calls_in_flight(spark, srv):
    words = 40
    prompts = [" ".join(["a"] * (words - 1) + [str(i % 10)]) for i in range(200)]
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=64)
    cost = chat.budget_cost("total_tokens", completion_tokens=1)
    estimate = cost({"prompt": prompts[0]})
    per_call = sum(billed(prompts[0]))
    assert per_call > estimate  # each call is billed more than it was charged before it
    limit, capacity, partitions = 2000, 4, 2
    budget = aiospark.Budget(limit, cost=cost)
    out = aiospark.unordered_wait(prompts_df(spark, prompts, partitions), chat, "id INT, prompt STRING, answer STRING",
                                  capacity=capacity, budget=budget, on_error="row")
    rows = out.collect()
    answered = [r for r in rows if r._error is None]
    assert answered and len(answered) < 200
    assert all("budget is spent" in r._error for r in rows if r._error is not None)
    bill = out.aiospark_metrics.total.usage["total_tokens"]
    assert bill == per_call * len(answered)
    assert budget.spent == bill                                   # the pot counts the bill
    assert bill <= limit + capacity * partitions * (per_call - estimate)  # the documented bound
    assert len(answered) * estimate < bill                         # without the charge, the pot would be short


def test_a_redis_budget_counts_the_bill_too_charged_and_given_back(spark, srv):
    """Short prompts are estimated above their bill (max_tokens), long ones of one-letter words
    below it: the Redis count ends at the bill exactly, within the bound of the calls in flight."""
    short, long = "hi there", " ".join(["a"] * 40)
    prompts = [short if i % 2 else long for i in range(200)]
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=30)
    cost = chat.budget_cost("total_tokens")
    assert cost({"prompt": short}) > sum(billed(short)) and cost({"prompt": long}) < sum(billed(long))
    worst = sum(billed(long)) - cost({"prompt": long})
    limit, capacity, partitions = 3000, 4, 2
    with RedisServer() as redis:
        budget = aiospark.Budget(limit, cost=cost, redis=redis.url, name=f"money-{id(chat)}")
        out = aiospark.unordered_wait(prompts_df(spark, prompts, partitions), chat,
                                      "id INT, prompt STRING, answer STRING", capacity=capacity, budget=budget,
                                      on_error="row")
        rows = out.collect()
        answered = [r for r in rows if r._error is None]
        assert answered and len(answered) < 200
        assert all("budget is spent" in r._error for r in rows if r._error is not None)
        bill = out.aiospark_metrics.total.usage["total_tokens"]
        assert bill == sum(sum(billed(r.prompt)) for r in answered)
        assert budget.spent == bill
        assert bill <= limit + capacity * partitions * worst


def test_plan_prints_the_tokens_and_the_cost_of_both_lanes(spark, srv):
    prompts = [f"question number {i} please" for i in range(50)] + [None] * 10
    df = spark.createDataFrame(list(enumerate(prompts)), "id INT, prompt STRING")
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, max_tokens=20,
                      price=Price(input=2.5, output=10.0, batch_discount=0.5))
    p = aiospark.plan(aiospark.unordered_wait, df, chat, "id INT, prompt STRING, answer STRING")
    assert p.calls == 60 and srv.seen == []  # nothing called
    prompt_tokens = sum(math.ceil(len(t) / 4) for t in prompts if t is not None)
    assert p.tokens == prompt_tokens + 50 * 20
    assert p.cost_live == pytest.approx((prompt_tokens * 2.5 + 50 * 20 * 10.0) / 1e6)
    assert p.cost_batch == pytest.approx(p.cost_live * 0.5)
    shown = str(p)
    assert f"estimated tokens {p.tokens:,}" in shown and "estimated cost live" in shown and "batch lane" in shown
    # no price: the tokens only; no max_tokens: the prompts only, and it says so
    bare = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY)
    q = aiospark.plan(aiospark.unordered_wait, df, bare, "id INT, prompt STRING, answer STRING")
    assert q.tokens == prompt_tokens and q.cost_live is None and "prompts only" in str(q)
    none = aiospark.plan(aiospark.unordered_wait, df.limit(0), chat, "id INT, prompt STRING, answer STRING")
    assert (none.calls, none.tokens, none.cost_live, none.cost_batch) == (0, 0, 0.0, 0.0)


def test_bad_prices_and_budget_costs_are_refused_at_definition(srv):
    with pytest.raises(ValueError, match=r"input=.*finite number >= 0"):
        Price(-1.0, 2.0)
    with pytest.raises(ValueError, match="output"):
        Price(1.0, float("nan"))
    with pytest.raises(ValueError, match=r"batch_discount.*\[0, 1\]"):
        Price(1.0, 2.0, batch_discount=1.5)
    with pytest.raises(ValueError, match="cached_input"):
        Price(1.0, 2.0, cached_input=-3)
    url = srv.base_url
    with pytest.raises(ValueError, match="no price for the model 'chat'"):
        OpenAIChat("chat", base_url=url, api_key=KEY, price={"other": PRICE})
    with pytest.raises(TypeError, match="Price"):
        OpenAIChat("chat", base_url=url, api_key=KEY, price={"chat": 3.0})
    with pytest.raises(TypeError, match="Price"):
        OpenAIChat("chat", base_url=url, api_key=KEY, price=3.0)
    with pytest.raises(ValueError, match="output= price"):
        OpenAIChat("chat", base_url=url, api_key=KEY, price=Price(1.0))
    OpenAIEmbeddings("emb", base_url=url, api_key=KEY, price=Price(1.0))  # embeddings bill no output
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAIChat("chat", base_url=url, api_key=KEY, price=PRICE).budget_cost()
    with pytest.raises(ValueError, match="needs the model's price"):
        OpenAIChat("chat", base_url=url, api_key=KEY, max_tokens=5).budget_cost("cost")
    with pytest.raises(ValueError, match="usage"):
        OpenAIChat("chat", base_url=url, api_key=KEY, max_tokens=5).budget_cost("dollars")
    with pytest.raises(ValueError, match="completion_tokens"):
        OpenAIChat("chat", base_url=url, api_key=KEY).budget_cost("total_tokens", completion_tokens=0)
    chat = OpenAIChat("chat", base_url=url, api_key=KEY, max_tokens=5, price=PRICE)
    assert KEY not in repr(chat.budget_cost()) and KEY not in repr(aiospark.Budget(1.0, cost=chat.budget_cost()))


def test_the_progress_line_shows_the_cost_next_to_the_tokens():
    from aiospark.spark.progress import format_line

    p = {"rows": 10, "inflight": 0, "errors": 0, "running": 1, "finished": 0,
         "usage": {"prompt_tokens": 900, "completion_tokens": 100, "cost": 0.01234}}
    line = format_line(p, 2.0, budget_left=0.5)
    assert "1,000 tokens  cost 0.0123  budget left 0.5" in line
    assert "cost" not in format_line({**p, "usage": {"total_tokens": 5}}, 2.0)
