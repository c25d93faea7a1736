"""The one task pipeline's plan (aiospark.spark.task.TaskPlan): what an async_udf's tasks run is
one picklable, typed object, journal included (Spark pickles the user's function with
cloudpickle; the plan's own parts are plain picklable objects, no closures)."""
import pickle

from pyspark import cloudpickle

import aiospark
from aiospark.spark.task import TaskPlan


def test_an_async_udf_task_plan_pickles_with_its_journal_and_handlers(spark, tmp_path):
    @aiospark.async_udf("long", on_error="null", batch_size=4, capacity=8,
                        journal=aiospark.Journal(str(tmp_path / "j")))
    async def double(values):
        return [2 * v for v in values]

    plan = double.func.plan()
    assert isinstance(plan, TaskPlan)
    again = pickle.loads(cloudpickle.dumps(plan))  # how Spark ships a task's function
    assert again.options.batch_size == 4 and again.out_rows == 1
    assert again.on_error("a row", ValueError("x")) == [None]
    assert again.durable.bound is not None  # the journal travels with the plan
    assert (again.invoke.batched, again.invoke.spread) == (True, False)
    # the rows the task's journal is keyed by: the argument values, as on the driver
    assert again.durable.of((1,)) == plan.durable.of((1,))
