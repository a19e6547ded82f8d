"""gpusched.forecaster: demand series from job events, Prophet forecasts with calibrated
intervals (seasonal-naive fallback), and the outlook the dynamic policy reads."""

from gpusched.forecaster.app import run_forecaster
from gpusched.forecaster.backtest import backtest
from gpusched.forecaster.fitting import FitTask, fit_many
from gpusched.forecaster.models import Calibrator, Forecast, ModelConfig, forecast_auto
from gpusched.forecaster.outlook import ForecastOutlook
from gpusched.forecaster.series import JobDemand, SeriesBuilder, offered_demand
from gpusched.forecaster.settings import ForecasterSettings

__all__ = [
    "Calibrator",
    "FitTask",
    "Forecast",
    "ForecastOutlook",
    "ForecasterSettings",
    "JobDemand",
    "ModelConfig",
    "SeriesBuilder",
    "backtest",
    "fit_many",
    "forecast_auto",
    "offered_demand",
    "run_forecaster",
]
