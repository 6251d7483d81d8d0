"""The code location's module (workspace.yaml's `module_name`), named once for what imports it by name: the cell
engine's workers load it, the run worker imports it before it forks its run processes; its `defs_for(state_dir)`
binds definitions to a state folder. A module of its own so that naming it imports nothing."""

CODE_LOCATION_MODULE = "churn_assets.orchestration.definitions"
