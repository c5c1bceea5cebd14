"""snakeddp.run.rules: one step per rule of the workflow, the one list the rules, `python -m snakeddp.steps`
and the report's crate are read against."""

from __future__ import annotations

import re

import pytest

from snakeddp.config.sources import SOURCE_KEYS
from snakeddp.errors import ConfigError
from snakeddp.run import rules
from snakeddp.steps import parse_args
from tests.helpers import REPO


def workflow_rules() -> dict[str, str]:
    """Each rule of the Snakefile and rules/*.smk, with its text up to the next rule."""
    text = "\n".join(path.read_text() for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))])
    blocks = re.split(r"^(?=(?:rule|checkpoint) \w+:)", text, flags=re.MULTILINE)
    return {block.split()[1].rstrip(":"): block for block in blocks if block.startswith(("rule ", "checkpoint "))}


def test_every_rule_is_one_step_and_every_step_a_rule():
    assert set(workflow_rules()) == set(rules.BY_RULE) | set(rules.TARGET_RULES)
    assert len(rules.BY_RULE) == len(rules.STEPS)
    rules.check_rules(workflow_rules())


def test_a_rule_without_a_step_or_a_step_without_a_rule_stops_the_workflow():
    with pytest.raises(ConfigError, match=r"rules without a step: data_shuffle; steps without a rule: report\)\. HINT"):
        rules.check_rules([*(set(rules.BY_RULE) - {"report"}), "all", "data_shuffle"])


def test_the_workflow_checks_its_rules_when_it_is_read():
    text = (REPO / "rules" / "hooks.smk").read_text()
    assert "snakeddp_rules.check_rules(rule.name for rule in workflow.rules)" in text


def test_each_rule_runs_the_tool_its_step_names():
    blocks = workflow_rules()
    for step in rules.STEPS:
        if step.subcommand:
            assert f'"{step.command} ' in blocks[step.rule], step
    assert "python -m snakeddp.launch" in blocks["train"] and "python -m snakeddp.steps report" in blocks["report"]
    assert "python -m snakeddp.launch" in blocks["search_train"]


def test_the_steps_command_line_has_a_subcommand_for_each_step_it_is_the_tool_of(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    shown = capsys.readouterr().out.split("positional arguments:")[1]
    assert set(re.findall(r"^    ([a-z-]+)", shown, flags=re.MULTILINE)) == {
        step.subcommand for step in rules.STEPS if step.subcommand
    }
    assert rules.BY_RULE["data_partition"].does in " ".join(shown.split())


def test_every_data_source_has_its_steps():
    assert {source for step in rules.STEPS for source in step.sources} == set(SOURCE_KEYS)
    assert [step.rule for step in rules.for_dataset("table")] == ["data_table", "data_manifest"]
    assert [step.rule for step in rules.for_dataset("module")] == ["data_module"]


def test_tools_keep_their_crate_ids():
    assert rules.BY_RULE["train"].tool == "#snakeddp.train"
    assert rules.BY_RULE["run_config"].tool == "#snakeddp.steps-run-config"
    assert len({step.tool for step in rules.STEPS}) == len(rules.STEPS)
