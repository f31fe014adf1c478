"""``specdeploy completion bash|zsh``: a shell completion script generated from the argparse parser itself, so
every command, option and choice the CLI has is completed and none it lacks.

bash: ``source <(specdeploy completion bash)`` (or save it under ``~/.local/share/bash-completion/completions/
specdeploy``). zsh: ``source <(specdeploy completion zsh)`` (the same script through zsh's ``bashcompinit``).
"""

from __future__ import annotations

import argparse
import shlex

from .common import PROG, epilog


def command_tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict]:
    """Per command path: its subcommands, its options and each option's choices."""
    subs: list[str] = []
    opts: list[str] = []
    choices: dict[str, list[str]] = {}
    out: dict[tuple[str, ...], dict] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                subs.append(name)
                out.update(command_tree(sub, (*path, name)))
        elif action.option_strings:
            opts.extend(o for o in action.option_strings if o.startswith("--") or len(action.option_strings) == 1)
            if action.choices:
                for o in action.option_strings:
                    choices[o] = [str(c) for c in action.choices]
        elif action.choices:  # a positional with choices (completion's shell): offered like subcommands
            subs.extend(str(c) for c in action.choices)
    out[path] = {"subs": subs, "opts": opts, "choices": choices}
    return out


def _case(rows: list[tuple[str, list[str]]]) -> str:
    lines = [f"        {shlex.quote(key)}) echo {shlex.quote(' '.join(words))} ;;" for key, words in rows if words]
    return "\n".join(lines)


def bash_script(parser: argparse.ArgumentParser) -> str:
    tree = command_tree(parser)
    fn = "_" + PROG.replace("-", "_")
    subs = _case([(" ".join(p), v["subs"]) for p, v in sorted(tree.items())])
    opts = _case([(" ".join(p), v["opts"]) for p, v in sorted(tree.items())])
    choices = _case([(f"{' '.join(p)}|{o}", c) for p, v in sorted(tree.items()) for o, c in sorted(v["choices"].items())])
    return f"""# {PROG} shell completion, generated from its argument parser: source <({PROG} completion bash)
{fn}_subs() {{
    case "$1" in
{subs}
    esac
}}
{fn}_opts() {{
    case "$1" in
{opts}
    esac
}}
{fn}_choices() {{
    case "$1" in
{choices}
    esac
}}
{fn}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" path="" i w words
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        words=" $({fn}_subs "$path") "
        if [[ $w != -* && $words == *" $w "* ]]; then path="${{path:+$path }}$w"; fi
    done
    words="$({fn}_choices "$path|$prev")"
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$({fn}_opts "$path")" -- "$cur"))
    else
        words="$({fn}_subs "$path")"
        COMPREPLY=()
        if [[ -n $words ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); fi
    fi
}}
complete -o default -F {fn} {PROG}
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return ("# zsh: the bash completion through bashcompinit\n"
            "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
            + bash_script(parser))


def cmd_completion(args: argparse.Namespace) -> int:
    from . import build_parser

    parser = build_parser()
    print(bash_script(parser) if args.shell == "bash" else zsh_script(parser), end="")
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser("completion", help="print a shell completion script (bash, zsh)",
                       description="Print a completion script for bash or zsh, generated from this CLI's own parser "
                       "(every command, option and option choice). Load it in the current shell with "
                       f"`source <({PROG} completion bash)`, or save it where your shell loads completions.",
                       epilog=epilog([f"{PROG} completion bash > ~/.local/share/bash-completion/completions/{PROG}",
                                      f"source <({PROG} completion bash)", f"source <({PROG} completion zsh)"],
                                     "printed"))
    c.add_argument("shell", choices=["bash", "zsh"])
    c.set_defaults(func=cmd_completion)
