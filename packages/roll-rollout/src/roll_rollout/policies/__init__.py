"""How an episode asks a model for its next turn, token ids in and token ids out: `policy.py`
(`PolicyClient`; batching, streaming, remote and random policies; the request and result payloads),
`openai_policy.py` (a policy served by an OpenAI-compatible server), and the training proxy of
`openai_agent` slots: `agent_proxy.py` (`AgentProxy`: an OpenAI-compatible endpoint per episode that
records each call's ids), `openai_chat.py` (chat messages and tools as prompt ids, sampled text as the
reply), `openai_fields.py` (what the proxy does with each request field), `openai_responses.py` (the
Responses API as chat), `openai_stream.py` (streamed replies as server-sent events), `json_http.py` (the
JSON-over-HTTP plumbing shared with `roll serve`). Nothing here knows of trajectories, env slots or the
scheduler."""
