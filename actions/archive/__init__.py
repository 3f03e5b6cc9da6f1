"""The ``archive_ingest`` action: records gathered into micro-batches (:mod:`.batcher`), each batch one Spark job
(:mod:`.job`) in the process's one session (:mod:`.session`), its rows appended to a Parquet catalog
(:mod:`.catalog`). Importing this package needs no pyspark; the modules that use it import it themselves."""
