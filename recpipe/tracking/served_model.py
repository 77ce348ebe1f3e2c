"""The code file of a registered recpipe model (MLflow "models from code").

MLflow runs this file to build the served model, so a registered version holds no pickle: the class is
imported from the installed recpipe; its weights and settings are the verified export folder (artifact
``exported_model``). Never imported by recpipe itself.
"""

import mlflow.models

from recpipe.tracking.pyfunc import RawRowsModel

mlflow.models.set_model(RawRowsModel())
