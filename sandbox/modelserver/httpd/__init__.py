"""A lean HTTP/1.1 server on asyncio protocols, built for streaming tokens cheaply.

uvicorn + starlette cost about 0.1 ms of CPU per streamed token here (ASGI send coroutines, a
queue and a task wake per token, h11 framing); on two shared cores that CPU is what makes
token pacing late. This server writes each token from a plain callback straight to the
transport, stamping the moment of the write.
"""
