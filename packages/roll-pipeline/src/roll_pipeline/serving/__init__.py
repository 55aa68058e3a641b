"""A trained model at work: `evaluate.py` (`roll eval`) and `openai_server.py` (`roll serve`, an
OpenAI-compatible endpoint)."""
