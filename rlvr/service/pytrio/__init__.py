"""The PyTRIO front's pieces (`python -m rlvr.service.as_pytrio` runs them): the wire
schemas and conversions (`wire`), the HTTP server (`http`), the FIFO accept-then-poll
event queue (`events`), sessions and training/sampling runs over `rlvr.service`
(`runs`), and the OpenAI-compatible chat endpoint (`chat`). A thin front: behaviour lives
once, in the service."""
