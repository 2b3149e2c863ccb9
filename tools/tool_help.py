"""tool_help.py: the --help layout every tool in tools/ shares (standard library only).

    ap = argparse.ArgumentParser(description=..., formatter_class=HelpFormatter)

Each option's help ends with its default: "(default: X)", "(default: off)" for a switch, nothing
when the text already says it. An option whose default is None must say in its text what happens
without it (tests/t_tools.sh checks that every option of every tool shows a default). The
description keeps its own line breaks, so a tool may reuse its docstring there.
"""
import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default is None or action.default is argparse.SUPPRESS:
            return text
        if action.default is False:
            return text + " (default: off)"
        return super()._get_help_string(action)
