"""Store readers: one per store a route can name, chosen by the route's store (`READERS`).

| store          | reader                    | reads                                                        |
| -------------- | ------------------------- | ------------------------------------------------------------ |
| `staging`      | `readers/staged.py`       | `<world>_staging.<table>` partitions at a refresh day        |
| `warehouse`    | `readers/warehouse.py`    | dbt as-of views of `<world>_analytics` at a day              |
| `operational`  | `readers/operational.py`  | the Mongo database of a day                                  |
| `saas`         | `readers/saas.py`         | the SaaS API as of a day                                     |
| `documents`    | `readers/documents.py`    | contract documents of a day on disk                          |
| `vector_index` | `readers/vector_index.py` | contract chunks of the `vector_index` partition of a day     |

The RAG corpus is not read here: it is the RAG arms' own store (`arms/corpus.py`).
"""

from __future__ import annotations

from churn_assets.grounding.readers import documents, operational, saas, staged, vector_index, warehouse
from churn_assets.grounding.readers.base import Reader

READERS: dict[str, Reader] = {
    "staging": staged.read,
    "warehouse": warehouse.read,
    "operational": operational.read,
    "saas": saas.read,
    "documents": documents.read,
    "vector_index": vector_index.read,
}
