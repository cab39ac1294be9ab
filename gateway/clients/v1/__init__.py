"""The OpenAI-compatible client API under `/v1`: async views, so a stream holds no thread.

Each view is one operation, in a module of its own (`chat`, `retrieve`, `embeddings`, `rerank`,
`model_list`, `responses`, `files`, `vector_stores`, `vector_store_files`); `endpoint` is what
they share (CORS, the method, the key and its scope, the error envelope, the request log row) and
`spend` how a call's tokens reach its row.
"""
