"""Bessel and Airy functions jax lacks: ports of the Cephes approximations torch's CPU
kernels use (ATen/native/Math.h), same coefficients and branches, so the results agree
to rounding. Ints and bool compute in the default float, half types in float32."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, to_array, upcast
from torch_xla.lowering.registry import register

_PIO4 = 0.785398163397448309615660845819875721
_3PIO4 = 2.356194490192344928846982537459627163
_SQ2OPI = 0.797884560802865355879892119868763737
_TWOOPI = 0.636619772367581343075535053490057448

# Asymptotic (x > 5) rational coefficients shared by j0/y0 and by j1/y1.
_PP0 = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
        5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
        9.99999999999999997821e-01)
_PQ0 = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
        5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
        1.00000000000000000218e+00)
_QP0 = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
        -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
        -5.14105326766599330220e+01, -6.05014350600728481186e+00)
_QQ0 = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
        7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
        2.42005740240291393179e+02)
_PP1 = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
        5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
        1.00000000000000000254e+00)
_PQ1 = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
        5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
        9.99999999999999997461e-01)
_QP1 = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
        3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
        2.11688757100572135698e+02, 2.52070205858023719784e+01)
_QQ1 = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
        9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
        3.36093607810698293419e+02)
# Small-x (x <= 5) rational parts of y0 and y1 (the log(x) * j_n(x) term is added).
_YP0 = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
        -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
        4.42733268572569800351e+16, -1.84950800436986690637e+16)
_YQ0 = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
        8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
        2.50596256172653059228e+17)
_YP1 = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
        -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17)
_YQ1 = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
        1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
        6.87141087355300489866e+16, 3.97270608116560655612e+18)
# Small-x (x <= 5) rational parts of j0 and j1, needed by y0 and y1.
_RP0 = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
        9.70862251047306323952e+15)
_RQ0 = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
        1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
        3.18121955943204943306e+16, 1.71086294081043136091e+18)
_RP1 = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
        3.68295732863852883286e+15)
_RQ1 = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
        2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
        8.95222336184627338078e+16, 5.32278620332680085395e+18)
# Chebyshev series of k0 and k1 on (0, 2] and on (2, inf).
_K0A = (1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
        1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
        1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
        -5.35327393233902768720e-01)
_K0B = (5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
        -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
        6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
        -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
        1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
        -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
        2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
        -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
        2.44030308206595545468e+00)
_K1A = (-7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
        -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
        -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
        -3.53155960776544875667e-01, 1.52530022733894777053e+00)
_K1B = (-5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
        1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
        -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
        3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
        -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
        2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
        -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
        1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
        2.72062619048444266945e+00)
# Airy Ai: asymptotic rational coefficients for x >= 2.09 (AN/AD) and x < -2.09.
_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
       1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
       1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
       1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
       1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
        -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
        -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)
_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
        9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
        4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
        9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
        5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
        8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
        5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
        4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
        4.91834570062930015649e-09)


def _horner(y, coefficients):
    """sum c_i y^(n-i), highest power first, in y's dtype (torch's loop)."""
    out = jnp.zeros_like(y)
    for c in coefficients:
        out = out * y + jnp.asarray(c, y.dtype)
    return out


def _chbevl(y, coefficients):
    """Clenshaw's sum of a Chebyshev series at y (Cephes `chbevl`)."""
    b0, b1, b2 = jnp.full_like(y, coefficients[0]), jnp.zeros_like(y), jnp.zeros_like(y)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + jnp.asarray(c, y.dtype)
    return 0.5 * (b0 - b2)


def _asymptotic(x, pp, pq, qp, qq, phase, sine_first):
    """The x > 5 form shared by j_n and y_n: amplitude and phase rational functions."""
    w = 25.0 / (x * x)
    p, q = _horner(w, pp) / _horner(w, pq), 5.0 / x * (_horner(w, qp) / _horner(w, qq))
    s, c = jnp.sin(x - phase), jnp.cos(x - phase)
    value = p * s + q * c if sine_first else p * c - q * s
    return value * _SQ2OPI / jnp.sqrt(x)


def _j0_small(x):
    z = x * x
    return (z - 5.78318596294678452118e+00) * (z - 3.04712623436620863991e+01) * (
        _horner(z, _RP0) / _horner(z, _RQ0))


def _j1_small(x):
    z = x * x
    return _horner(z, _RP1) / _horner(z, _RQ1) * x * (z - 1.46819706421238932572e+01) * (
        z - 4.92184563216946036703e+01)


def _guard(x, value, at_zero):
    """torch's special cases of y_n and k_n: at_zero at 0, NaN below."""
    value = jnp.where(x == 0, jnp.asarray(at_zero, x.dtype), value)
    return jnp.where(x < 0, jnp.asarray(jnp.nan, x.dtype), value)


def _inside(x, high):
    """x where 0 < x <= high, else high: the unused branch stays finite."""
    return jnp.where((x > 0) & (x <= high), x, jnp.asarray(high, x.dtype))


def _y0(x):
    small = _inside(x, 5.0)
    near = _horner(small * small, _YP0) / _horner(small * small, _YQ0) + (
        _TWOOPI * jnp.log(small) * _j0_small(small))
    big = jnp.maximum(x, 5.0)
    far = _asymptotic(big, _PP0, _PQ0, _QP0, _QQ0, _PIO4, sine_first=True)
    return _guard(x, jnp.where(x <= 5, near, far), -jnp.inf)


def _y1(x):
    small = _inside(x, 5.0)
    j1 = _j1_small(small)
    near = small * (_horner(small * small, _YP1) / _horner(small * small, _YQ1)) + (
        _TWOOPI * (j1 * jnp.log(small) - 1.0 / small))
    big = jnp.maximum(x, 5.0)
    far = _asymptotic(big, _PP1, _PQ1, _QP1, _QQ1, _3PIO4, sine_first=True)
    return _guard(x, jnp.where(x <= 5, near, far), -jnp.inf)


def _k0_parts(x):
    """(k0 on (0, 2], exp(x) * k0 on (2, inf)), each finite off its own interval."""
    small, big = _inside(x, 2.0), jnp.maximum(x, 2.0)
    near = _chbevl(small * small - 2.0, _K0A) - jnp.log(0.5 * small) * jsp.i0(small)
    far = _chbevl(8.0 / big - 2.0, _K0B) / jnp.sqrt(big)
    return near, far


def _k1_parts(x):
    small, big = _inside(x, 2.0), jnp.maximum(x, 2.0)
    near = jnp.log(0.5 * small) * jsp.i1(small) + _chbevl(small * small - 2.0, _K1A) / small
    far = _chbevl(8.0 / big - 2.0, _K1B) / jnp.sqrt(big)
    return near, far


def _k0(x):
    near, far = _k0_parts(x)
    return _guard(x, jnp.where(x <= 2, near, jnp.exp(-x) * far), jnp.inf)


def _k1(x):
    near, far = _k1_parts(x)
    return _guard(x, jnp.where(x <= 2, near, jnp.exp(-x) * far), jnp.inf)


def _k0e(x):
    near, far = _k0_parts(x)
    return _guard(x, jnp.where(x <= 2, near * jnp.exp(x), far), jnp.inf)


def _k1e(x):
    near, far = _k1_parts(x)
    return _guard(x, jnp.where(x <= 2, near * jnp.exp(x), far), jnp.inf)


def _airy_series(x):
    """Maclaurin series Ai(x) = c1 f(x) - c2 g(x), summed until every element's last term
    is below epsilon relative to f (torch's stopping rule, per element)."""
    eps = jnp.finfo(x.dtype).eps
    z = x * x * x
    one = jnp.ones_like(x)

    def more(state):
        return jnp.any(state[-1])

    def step(state):
        f, g, k, m, n, active = state
        m2 = m * z / (k + 1)
        n2 = n * z / (k + 2)
        m2 = m2 / (k + 2)
        n2 = n2 / (k + 3)
        f2, g2 = f + m2, g + n2
        new = [jnp.where(active, a, b) for a, b in ((f2, f), (g2, g), (k + 3, k), (m2, m),
                                                     (n2, n))]
        return (*new, active & (jnp.abs(m2 / f2) > eps))

    state = (one, x, one, one, x, jnp.ones(x.shape, bool))
    f, g = lax.while_loop(more, step, state)[:2]
    return 0.355028053887817239260 * f - 0.258819403792806798405 * g


def _airy_ai(x):
    neg = jnp.minimum(x, -2.09)
    zeta = -2.0 * neg * jnp.sqrt(-neg) / 3.0
    z = 1.0 / zeta
    zz = z * z
    t = zeta + 0.25 * np.pi
    oscillating = 5.64189583547756286948e-01 / jnp.sqrt(jnp.sqrt(-neg)) * (
        jnp.sin(t) * (1.0 + zz * _horner(zz, _AFN) / _horner(zz, _AFD))
        - jnp.cos(t) * (z * _horner(zz, _AGN) / _horner(zz, _AGD)))
    pos = jnp.clip(x, 2.09, 103.892)
    zeta = 2.0 * pos * jnp.sqrt(pos) / 3.0
    decaying = 5.64189583547756286948e-01 * (_horner(1.0 / zeta, _AN) / _horner(1.0 / zeta, _AD)
                                             ) / (2.0 * jnp.sqrt(jnp.sqrt(pos)) * jnp.exp(zeta))
    series = _airy_series(jnp.where((x >= -2.09) & (x < 2.09), x, jnp.zeros_like(x)))
    value = jnp.where(x < -2.09, oscillating, jnp.where(x < 2.09, series, decaying))
    value = jnp.where(x > 103.892, jnp.zeros_like(x), value)
    return jnp.where(jnp.isinf(x), jnp.asarray(jnp.nan, x.dtype), value)


def _float_unary(fn):
    def lower(x):
        out = dtypes.float_type(x)
        return fn(to_array(x, upcast(out))).astype(out)

    lower.__qualname__ = fn.__name__.lstrip("_")
    return lower


register(aten.special_bessel_y0.default)(_float_unary(_y0))
register(aten.special_bessel_y1.default)(_float_unary(_y1))
register(aten.special_modified_bessel_k0.default)(_float_unary(_k0))
register(aten.special_modified_bessel_k1.default)(_float_unary(_k1))
register(aten.special_scaled_modified_bessel_k0.default)(_float_unary(_k0e))
register(aten.special_scaled_modified_bessel_k1.default)(_float_unary(_k1e))
register(aten.special_airy_ai.default)(_float_unary(_airy_ai))
