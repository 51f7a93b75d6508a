"""scripts/bench as a package: cases that measure and write a JSON record each, and one renderer of
docs/benchmarks.md from those records.

  common.py            paths, running one command under bench/timeit, a head and its console
  build.py             the release flowrun and the C helpers the cases run
  conditions.py        what a record says about the run: machine, commit, versions, load
  record.py            a case's record: its rows' runs summed up into figures, read and written as JSON
  cases_node.py        (a) to (d): one node, 8 workers, flowrun against torchrun and a C floor
  cases_multinode.py   (e) to (h): the control plane, every node this host
  cases_recovery.py    (r): a lost node, flowrun's hot spare against torchrun's elastic agents
  cases_forensics.py   (i) and (j): from a stall to the grouped report of py-spy stacks
  cases_drain.py       (k): emergency checkpoints when a peer fails
  render*.py           the page, from the records alone (render_node, render_multinode, render_more)
  cli.py               the command line: measure the cases asked for, then render; or render only
"""
