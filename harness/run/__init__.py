"""The run, ``python -m harness.run`` (or ``python -m harness run``): discovery -> access -> agent
trial -> scoreboard -> bench -> accuracy -> cost -> report on what is deployed.

- ``cli``: the command line, the offline plan, and ``main``, which discovers the endpoints,
  opens their tunnels and runs the stages;
- ``stages``: the stages as objects one loop runs in order, and the ``RunContext`` they share;
- ``weights``: what each backend served (model, commit, config and tokenizer digest), for meta.json.

The stages' own work lives in their packages (harness/agent, harness/bench, harness/accuracy,
harness/cost, harness/report); this package only orders them. It imports nothing at import time,
so ``import harness.run.stages`` does not load the command line.
"""
