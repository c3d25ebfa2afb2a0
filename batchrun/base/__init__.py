"""base: what every stage uses and that knows nothing of the pipeline.

Errors a user can act on (errors), the one redaction of keys from everything stored, printed or
logged (redaction), JSON Lines as every provider writes and reads them (jsonl), file checksums
(checksums), provider-chosen names made safe as path components (safepath), defensive reading
of the files a user hands batchrun (userfiles), progress lines on stderr (progress), the guard
every provider call's HTTP requests pass through (netguard: the route's own origin only, within
the run's time limit), the backoff arithmetic of retries (backoff), lengths of time as options
take them (durations), the garbage collector paused around bulk work (gcpause) and batchrun's
version.

May import: nothing else of batchrun.
"""
