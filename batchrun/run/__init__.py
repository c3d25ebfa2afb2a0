"""run: the pipeline's steps, each a library function a command calls.

`plan` writes the pending requests into provider-native request files under jobs/ (request_files
takes each to the disk, checksummed); `preflight`
proves each route with one tiny online request and one batch listing before its first upload
under a policy; `submit` uploads and creates batches (adopting what an uncertain create made),
within the night's budget and the providers' queue limits (quota); `poll` follows them and
downloads what ended (and sends sync-transport batches online); `collect` reconciles result
lines into state.db, queues judging and writes results/; `refresh` loops the three until done,
stuck or out of time. `probe` measures a route's real context window (probe_caps: the caps it
suggests, recorded and written), `status` says what is where and cancels batches, `faults` holds
the crash points the crash-safety tests kill at. Each library function takes the command's
resolved inputs (ledger.inputs.Inputs), or a Config that it resolves once at its top.

May import: base, providers, protocol, ledger, publish.
"""
