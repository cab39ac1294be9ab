"""Model connections, prices, provider adapters and the hardened outbound HTTP client: the
layer every app that talks to a model stands on."""
