"""The lead's Raft node: pysyncobj around the Knowledge Base, by concern.

* ``state``: ``ReplicatedKB``, the state machine: each command is one log entry type and
  only forwards to a ``KnowledgeBase.apply_*`` transition, under the replica's lock;
* ``commands``: ``Commands``, every replicated write with its arguments and result typed
  (``RaftNode.commands``): the only way the rest of the lead writes to the KB;
* ``node``: ``RaftNode``, which owns the ``SyncObj`` (timing, files, membership, code
  version) and turns pysyncobj's callbacks into blocking proposals with a timeout;
* ``batcher``: ``ReportBatcher``, which folds reports into one log entry per batch;
* ``dump``: the full dump, captured on the Raft thread and pickled and written off it;
* ``collector`` and ``timing``: the garbage collector's pauses and thresholds, the Raft
  thread's tick gaps, ``RaftTiming``;
* ``transport``: the Raft port, bound to the address given, every frame sealed with the
  group's secret (``secret``: the secret file, its keys and their rotation);
* ``pickling``: how pysyncobj pickles, and the unpickler that builds only the log's data;
* ``errors``: ``ProposalError`` and pysyncobj's failure names.

Importing any of them applies the changes the lead makes to pysyncobj (its serializer,
connections, pickling), all pinned to pysyncobj 0.3.17.
"""
