"""protocol: the WildTrace protocol's rules, and the inputs a run is made of.

The rules: the built-in caps table and the CJK rule (caps), the two prompts byte for byte
(prompts), reading a judge's verdict without ever inventing a zero (grading). The inputs: the
config (config: paths, protocol defaults, the judge panel and the routes; config_file reads and
checks batchrun.toml or .json, each value through config_values; config_write edits it for
`probe --write`), what each route's
settings make of its requests, hashed into its fingerprint (policy), the dataset (dataset) and
its corpus documents, read as the reference harness reads them, measured and JSON-escaped
(corpus). A command resolves them once, into ledger.inputs.Inputs.

May import: base, providers.
"""
