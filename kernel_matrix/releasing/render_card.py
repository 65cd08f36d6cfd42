"""The child process that renders a kernel's CARD.md (card_template.py starts it by this file's
path, as `python -I render_card.py`): standard library and jinja2 only, no kernel_matrix import,
so it runs wherever the parent's interpreter runs.

Reads {"template": ..., "values": {...}, "cpu_seconds": N} as JSON on stdin; writes
{"card": ...}, {"error": ..., "line": N or null} or {"stopped": true} as JSON on stdout. Before it renders it
limits its own CPU time and memory: a template is code (`{{ 9 ** 99999999 }}`, loops in
loops), and the kernel's release must end with one line, not hang."""

import json
import resource
import sys

MEMORY_BYTES = 2 * 1024**3
MAX_CARD_BYTES = 1024**2  # a README of more is no kernel card


def main() -> None:
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    cpu_seconds = int(request["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    answer: dict[str, object]
    try:
        # trim_blocks, as kernel-builder's minijinja environment (card.rs render_card)
        template = SandboxedEnvironment(trim_blocks=True).from_string(request["template"])
        card = template.render(**request["values"])
        if len(card.encode("utf-8")) > MAX_CARD_BYTES:
            answer = {"error": f"renders to more than {MAX_CARD_BYTES} bytes", "line": None}
        else:
            answer = {"card": card}
    except MemoryError:  # its limit (the CPU limit's is a signal the parent sees)
        answer = {"stopped": True}
    except TemplateSyntaxError as exc:
        answer = {"error": f"does not parse: {exc.message}", "line": exc.lineno}
    except Exception as exc:  # the template's own expressions: {{ 1 / 0 }}, the sandbox's refusals
        answer = {"error": f"cannot be rendered: {type(exc).__name__}: {exc}", "line": None}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
