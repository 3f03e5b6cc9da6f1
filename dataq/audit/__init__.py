"""Audits: proving that every file arrived, and putting right what did not (``dataq audit``): manifests of stored
copies, the copies audit of a storing root, the brakes and the repair. Its Redis access is :mod:`dataq.store.audits`."""
