"""Where episodes are played: env slots in a worker process, each looping over its queued episodes.

`worker.py` (`EnvWorker`: submit / cancel / poll, all msgpack), `env_manager.py` (`TrajEnvManager`: one env
slot's episode loop), `agent_manager.py` and `agent_turns.py` (`openai_agent` slots: an OpenAI-client agent
plays the episode through the training proxy; its recorded calls become trained turns), `players.py` (the
seats of a multi-player game), `env_calls.py` (env calls in a bounded thread pool under a timeout),
`call_pace.py` (which env calls run inline on the event loop), `env_process.py` and `env_child.py` (an env
in a child process of its own, forked from a zygote), `heap.py` (the start-up heap kept out of full garbage
collections)."""
