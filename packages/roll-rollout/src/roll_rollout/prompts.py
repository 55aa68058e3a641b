"""Token-level prompt assembly for multi-turn episodes (token-in/token-out).

The first prompt of an episode is the chat template applied to (system instruction, first
observation). Later turns append to the token ids already seen: the sampled response ids exactly as
sampled, then only the template's text *between* that response and the next generation prompt
(end-of-turn, the next user message, the assistant header). Earlier text is never re-tokenised, so the
ids trained on are the ids that were sampled.

`response_prefix` is text every assistant turn starts with (e.g. `<answer>`): its ids end each
generation prompt, so the model continues it; they are prompt ids, never sampled nor trained, and the env
reads the prefix followed by the sampled text (`full_response`).

`max_history_turns` bounds the context: 0 shows only the current observation; None keeps the whole
episode; k keeps the last k (observation, response) pairs before the current observation.

Rendering the chat template and running the tokenizer is the hot path of a rollout (most of an env
step's CPU time with a fast env). Both pieces are pure functions of their text (the first prompt of the
observation, the glue of the next observation and whether the response ended with eos), so each
builder keeps an exact LRU cache of them (`cache_size` entries each; 0 disables it): observations
repeat a lot (the envs of a group share their first one).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

_MARKER = "\u0000roll-response\u0000"


class ChatTokenizer(Protocol):
    """The slice of a Hugging Face tokenizer that prompt assembly uses."""

    eos_token_id: int | None

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def instruction_for(env: Any, configured: str | None) -> str:
    """The system instruction an env's episodes are prompted with: the configured one (`""`: none), or the
    env's own `instruction` where none is configured."""
    return env.instruction if configured is None else configured


class PromptBuilder:
    """Builds the prompt ids of each turn of an episode."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        instruction: str,
        max_history_turns: int | None = 0,
        cache_size: int = 4096,
        response_prefix: str = "",
    ) -> None:
        if max_history_turns is not None and max_history_turns < 0:
            raise ValueError(f"max_history_turns must be None or >= 0, got {max_history_turns}")
        self.tokenizer = tokenizer
        self.instruction = instruction
        self.max_history_turns = max_history_turns
        self.response_prefix = response_prefix
        self._prefix_ids = (
            list(tokenizer.encode(response_prefix, add_special_tokens=False)) if response_prefix else []
        )
        self._first = _LRU(cache_size)
        self._glue = _LRU(cache_size)

    def first_prompt(self, observation: str) -> list[int]:
        """Chat template of (instruction, observation) with the generation prompt (and the response prefix)."""
        return list(self._first.get(observation, lambda: self._render_first(observation)))

    def _render_first(self, observation: str) -> list[int]:
        messages = [{"role": "user", "content": observation}]
        if self.instruction:
            messages.insert(0, {"role": "system", "content": self.instruction})
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return (
            list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
            + self._prefix_ids
        )

    def continuation(self, response_ids: Sequence[int], observation: str) -> list[int]:
        """The ids that follow a sampled response: end of turn, next observation, assistant header (and prefix)."""
        eos = self.tokenizer.eos_token_id
        ends_with_eos = bool(response_ids) and eos is not None and response_ids[-1] == eos
        key = (ends_with_eos, observation)
        return list(self._glue.get(key, lambda: self._render_glue(ends_with_eos, observation)))

    def _render_glue(self, ends_with_eos: bool, observation: str) -> list[int]:
        messages = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _MARKER},
            {"role": "user", "content": observation},
        ]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        suffix = text[text.index(_MARKER) + len(_MARKER) :]
        eos = self.tokenizer.eos_token_id
        if ends_with_eos:
            eos_text = self.tokenizer.decode([eos], skip_special_tokens=False)
            if suffix.startswith(eos_text):
                suffix = suffix[len(eos_text) :]
        return list(self.tokenizer.encode(suffix, add_special_tokens=False)) + self._prefix_ids

    def full_response(self, sampled_text: str) -> str:
        """What the env reads for a turn: the response prefix followed by the sampled text."""
        return self.response_prefix + sampled_text

    def demonstration_ids(self, answer: str) -> list[int]:
        """The response ids of an answer the env demonstrates (its whole text, the response prefix included):
        the ids of the text after the prefix, then eos, as a policy would sample them; ValueError when the
        answer does not start with the prefix (the prefix's ids are prompt ids, never response ids)."""
        if not answer.startswith(self.response_prefix):
            raise ValueError(
                f"the demonstrated answer {answer!r:.120} does not start with the response prefix"
                f" {self.response_prefix!r}; the env's demonstration must answer in the format the prefix begins"
            )
        ids = list(self.tokenizer.encode(answer[len(self.response_prefix) :], add_special_tokens=False))
        eos = self.tokenizer.eos_token_id
        return ids + ([eos] if eos is not None else [])

    def prompt(self, observations: Sequence[str], responses: Sequence[Sequence[int]]) -> list[int]:
        """Prompt ids for the turn that answers `observations[-1]`, given the earlier responses.

        `observations` has one more entry than `responses`; only the last `max_history_turns`
        (observation, response) pairs are kept before the current observation.
        """
        start = self._history_start(observations, responses)
        ids = self.first_prompt(observations[start])
        for k in range(start, len(responses)):
            ids.extend(responses[k])
            ids.extend(self.continuation(responses[k], observations[k + 1]))
        return ids

    def messages(self, observations: Sequence[str], responses: Sequence[str]) -> tuple[dict[str, str], ...]:
        """The same prompt as `prompt`, as chat messages with the responses' text (for text-in APIs).

        A chat API has no standard way to start the assistant's turn with a prefix, so a builder with a
        `response_prefix` refuses (a token-in policy, e.g. a completions endpoint, handles it).
        """
        if self.response_prefix:
            raise ValueError(
                f"response_prefix {self.response_prefix!r} needs a token-in policy: a chat endpoint cannot start "
                "the assistant's turn with it; use the completions endpoint or drop response_prefix"
            )
        start = self._history_start(observations, responses)
        messages = [{"role": "system", "content": self.instruction}] if self.instruction else []
        for k in range(start, len(responses)):
            messages += [
                {"role": "user", "content": observations[k]},
                {"role": "assistant", "content": responses[k]},
            ]
        messages.append({"role": "user", "content": observations[-1]})
        return tuple(messages)

    def _history_start(self, observations: Sequence[Any], responses: Sequence[Any]) -> int:
        """Index of the first (observation, response) pair the prompt keeps."""
        if len(observations) != len(responses) + 1:
            raise ValueError(
                f"need len(observations) == len(responses) + 1, got {len(observations)}, {len(responses)}"
            )
        keep = (
            len(responses) if self.max_history_turns is None else min(self.max_history_turns, len(responses))
        )
        return len(responses) - keep


class _LRU:
    """A bounded least-recently-used map of immutable token-id tuples."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, tuple[int, ...]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], list[int]]) -> tuple[int, ...]:
        """The cached value of `key`, or `make()` (cached when there is room)."""
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        value = tuple(make())
        if self._size > 0:
            self._items[key] = value
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return value
