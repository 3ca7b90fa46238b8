"""A lean HTTP/1.1 server on asyncio protocols, built for streaming tokens cheaply.

With uvicorn + starlette each streamed token cost a queue put, a task wake, an ASGI send
coroutine and h11 framing: about 0.07 ms more CPU per token than this server (measured at 64
streams on 2 shared cores), and the write happened a task switch after the engine released
the token. Here each token is written from a plain callback straight to the transport, and
stamped at that moment.
"""
