"""Tests of what users install and run outside pytest: the wheel, the README's commands, spark-submit."""
