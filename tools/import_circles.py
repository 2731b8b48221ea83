"""Count the import circles in dayflow_tui: strongly connected components of the module import graph.

The graph is grimp's (the package's own modules, every ``import`` statement found by reading the source:
imports inside functions and under ``TYPE_CHECKING`` included, so a circle dodged by a late import still
counts). A component of more than one module, or a module importing itself, is a circle.

    python tools/import_circles.py          # prints each circle, then the count; exit 1 if there is one
"""

from __future__ import annotations

import sys

import grimp


def import_graph(package: str = "dayflow_tui") -> dict[str, set[str]]:
    graph = grimp.build_graph(package)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), keeping those that are circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))
    return found


def main() -> int:
    edges = import_graph()
    found = circles(edges)
    for component in found:
        print(f"circle of {len(component)}: {', '.join(component)}")
    print(f"{len(edges)} modules, {sum(len(v) for v in edges.values())} imports, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
