"""The `--help` layout of Strata's commands (strata-engine, strata-server): every flag that
takes a value says its default."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help ("none" for no value); a help that says its default in
    its own words keeps them, and a switch (a flag without a value) shows none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not action.option_strings or "(default" in (action.help or "") or action.nargs == 0:
            return action.help
        if action.default is None or action.default == []:
            return f"{action.help} (default: none)"
        return super()._get_help_string(action)
