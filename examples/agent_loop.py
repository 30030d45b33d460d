"""A minimal agent loop with cross-run memory (in memory, no LLM, deterministic).

Each run: read lessons with ``memory_retriever`` (tags query) before the agent node,
render them into the ``## Relevant Memory`` prompt block, "run" the agent, then write a
reflection with ``memory_writer`` under the idempotency key ``run_id:node_id:iteration``.
A retried write (same key) stores nothing new.

Run it with ``python examples/agent_loop.py``.
"""

from __future__ import annotations

import asyncio

from cycgraph_memory import (
    HashingEmbeddingProvider,
    InMemoryMemoryIndex,
    InMemoryMemoryStore,
    memory_retriever,
    memory_writer,
    render_memory_section,
)

REFLECTIONS = [
    "Ask for the failing request id before reading any logs.",
    "Check the cache layer first when latency spikes at the hour mark.",
    "Summarise findings in three bullets; reviewers skip long notes.",
]


def agent(goal: str, memory_block: str) -> str:
    """Stand-in for an LLM call: shows the prompt it would receive."""
    return f"## Goal\n{goal}\n\n{memory_block or '(no memory yet)'}"


async def run_once(
    run: int, retrieve: object, write: object, *, retry_write: bool = False
) -> str:
    """One workflow run: read memory, run the agent, write a reflection."""
    assert callable(retrieve) and callable(write)
    memory = await retrieve({"tags": ["lesson", "graph:support-v1"], "max_facts": 5})
    prompt = agent("Debug the slow checkout endpoint", render_memory_section(memory))
    reflection = [{
        "content": REFLECTIONS[run % len(REFLECTIONS)],
        "tags": ["lesson", "graph:support-v1"],
        "provenance": {"source": "agent", "run_id": f"run-{run}", "node_id": "reflect"},
    }]
    key = {"idempotency_key": f"run-{run}:reflect:0"}
    await write(reflection, key)
    if retry_write:  # e.g. the node crashed after writing and was retried
        await write(reflection, key)
    return prompt


async def main() -> list[str]:
    """Three runs against one store; returns the prompts the agent saw."""
    embedder = HashingEmbeddingProvider(dimensions=64)
    store = InMemoryMemoryStore(expected_dimensions=64)
    index = InMemoryMemoryIndex(expected_dimensions=64)
    retrieve = memory_retriever(store, index, embedder)
    write = memory_writer(store, index=index, embedder=embedder)
    prompts = [await run_once(run, retrieve, write, retry_write=run == 1) for run in range(3)]
    for n, prompt in enumerate(prompts):
        print(f"=== run {n} prompt ===\n{prompt}")
    lessons = await store.find_facts(tags=["lesson"])
    print(f"stored lessons: {len(lessons)}")  # 3: the retried write stored nothing
    return prompts


if __name__ == "__main__":
    asyncio.run(main())
