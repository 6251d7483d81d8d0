"""`churnbench bench`: one benchmark of the whole pipeline, stage by stage, at one or more world scales.

    churnbench bench [--scale 1,10] [--stages generate,verify,...] [--repeats 3] [--json PATH] [--readme README.md]

`stages.py` holds what each stage measures (each one the way the pipeline runs it); `child.py` runs one stage
in a process of its own, so that its peak resident memory is its own (the runner reads it with `os.wait4`,
children included: dbt, pool workers); `runner.py` puts the stages in order on a state folder per scale,
collects medians, load averages and memory, and renders the table (terminal and the README's Markdown block).
"""
