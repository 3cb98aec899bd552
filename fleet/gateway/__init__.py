"""`fleet gateway` (issue 23): one forward-proxy endpoint for crawlers. Each CONNECT or plain HTTP request
gets a proxy by the lease rules (`fleet.store.leases`), with retries on another proxy and ban cooldowns;
`decide` holds the pure decisions, `clients` the credentials file, `server` the data plane, `runtime` the
process, `metrics` its metric families."""
