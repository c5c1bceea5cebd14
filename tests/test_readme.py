"""The README and docs/ are true of the code: their links resolve, their commands parse, their run
names are what the sweep makes, the table of where the code lives is the tree, and (e2e) the
README's --config examples plan the runs it names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from snakemake.cli import get_argument_parser

from snakeddp import config as configuration
from snakeddp.cli import _main as snakeddp_main
from tests.checkout import Checkout
from tests.helpers import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PACKAGE = REPO / "src" / "snakeddp"


def code_blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def commands(program: str) -> list[list[str]]:
    """Every ``program ...`` line of the README's bash blocks, comments and pipes cut off."""
    found = []
    for block in code_blocks(README, "bash"):
        for line in block.splitlines():
            line = line.split(" #")[0].split(" | ")[0].strip()
            if line.startswith((program, f".venv/bin/{program}")):
                found.append(shlex.split(line)[1:])
    assert found, program
    return found


def test_the_readme_fits_on_a_screen_or_two_and_links_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert linked == {f"docs/{page.name}" for page in DOCS}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_relative_link_resolves_and_none_names_a_missing_design_sketch(page):
    text = page.read_text()
    assert "DESIGN.md" not in text
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_readme_snakemake_commands_parse_and_name_profiles_that_exist():
    parser = get_argument_parser()
    for argv in commands("snakemake"):
        args = parser.parse_args(argv)
        for profile in args.profile or []:
            assert (REPO / "profiles" / Path(profile).name / "config.yaml").is_file(), argv


def test_the_readme_snakeddp_commands_parse(capsys):
    for argv in commands("snakeddp"):
        # --help stops after parsing: the subcommand and its options exist.
        with pytest.raises(SystemExit) as stopped:
            snakeddp_main([*argv, "--help"])
        assert stopped.value.code == 0, argv
    capsys.readouterr()


def test_the_sweep_example_makes_the_runs_the_readme_names():
    section = README.read_text().split("### Sweeps")[1].split("\n## ")[0]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1))
    runs = configuration.expand_sweep(configuration.validate(example))
    named = re.findall(r"`((?:devices|lr)-[^`]+)`", section.split("```")[2].split("Without")[0])
    assert named == list(runs)
    assert "`base`" in section and list(configuration.expand_sweep(configuration.validate({}))) == ["base"]


def test_where_the_code_lives_is_the_tree():
    text = (REPO / "docs" / "development.md").read_text().split("## Where the code lives")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    for name in listed:
        assert (PACKAGE / name).exists(), name
    tree = {path.name + "/" for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    tree |= {path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    assert listed == tree


@pytest.mark.e2e
@pytest.mark.dev_venv  # its examples turn a tracker on
def test_the_readme_config_examples_plan_what_it_says(tmp_path):
    """`--profile local` is the set-up's link to profiles/local; here it is typed as the path."""
    checkout = Checkout(tmp_path)
    for argv in commands("snakemake"):
        if "--config" in argv:
            argv = ["profiles/local" if arg == "local" else arg for arg in argv]
            done = checkout.snakemake(*argv, "-n")
            assert done.returncode == 0 and "This was a dry-run" in done.stdout, (argv, done.stdout)
    done = checkout.snakemake("--profile", "profiles/local", "-n", "-p", "--config", "sweep={model.lr: [0.003, 0.01]}")
    assert done.returncode == 0, done.stdout
    planned = sorted(set(re.findall(r"--run-id (\S+) ", done.stdout)))
    sentence = README.read_text().split("`--config 'sweep={model.lr: [0.003, 0.01]}'`")[1].split("\n\n")[0]
    assert planned == re.findall(r"`(lr-[^`]+)`", sentence)


CONFIG_README = REPO / "config" / "README.md"


def test_the_config_readme_lists_every_top_level_section_of_the_schema_in_its_order():
    rows = re.findall(r"^\| `([a-z_]+)` \|", CONFIG_README.read_text(), flags=re.M)
    assert rows == list(configuration.load_schema()["properties"])


def test_the_config_readmes_example_is_valid_and_plans_the_runs_it_says_and_its_links_resolve():
    (example,) = code_blocks(CONFIG_README, "yaml")
    runs = configuration.expand_sweep(configuration.validate(yaml.safe_load(example)))
    assert list(runs) == ["lr-0.003_devices-2", "lr-0.01_devices-2"]
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", CONFIG_README.read_text()):
        assert (CONFIG_README.parent / target).exists(), target


def inline_snakemake_commands(page: Path) -> list[str]:
    """The ``.venv/bin/snakemake ...`` commands a page writes inline, in one code span each."""
    return re.findall(r"`(\.venv/bin/snakemake [^`\n]+)`", page.read_text())


def test_the_docs_inline_snakemake_commands_pass_the_config_checks_as_typed():
    """docs/slurm.md said to try the mig partition "with launch.devices: 2": typed as --config, the default
    config's sweep of launch.devices refused it (the --config would be silently ignored). Each command the docs
    write inline is typed as written, in the checkout's root with config/config.yaml."""
    from snakeddp.config import layers
    from snakeddp.run import current

    typed = [line for page in DOCS for line in inline_snakemake_commands(page) if " --config " in line]
    assert any("slurm_partition='mig'" in line for line in typed), typed
    parser = get_argument_parser()
    for line in typed:
        entries = parser.parse_args(shlex.split(line)[1:]).config
        config = current.composed(REPO, [], entries)
        validated = configuration.validate(config, source="config")
        layers.check_not_swept(layers.command_line_config(entries), validated["sweep"])
